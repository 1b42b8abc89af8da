"""Which engine serves the policy's rollouts (`inference=` in the config).

- rlvr  (default) rlvr's own engine, in the training process (rlvr.engine)
- vllm  vLLM's OpenAI-compatible server: one rlvr starts in `make vllm-env`'s environment
        (rlvr.inference.server), or the servers of `inference.urls`; training stays on rlvr's
        engine and each step's adapter is loaded into the servers (rlvr.inference.backend)
"""
