"""The local judge's server: rlvr's engine serving the judge model as it is
(rlvr.engine.server.serve_frozen), with ART's RULER schema pinned to each request's trajectories.

`judges.local.LocalJudge` runs it as a child process, `python -m judges.server --fd N ...`: the
listening socket is bound by the parent and inherited (no port is picked, released and bound
again, so no other process can take it in between), and the bearer key arrives in the environment
(`SERVER_KEY_ENV`), never on the command line, which other users can read.

ART's own RULER works against it unchanged: `art.rewards.ruler_score_group(group,
"hosted_vllm/smollm2-135m-judge", extra_litellm_params={"api_base": ..., "api_key": ...})` asks
for a plain list of scores, and the server pins that schema to the trajectories the prompt lists
(`pin_ruler`, judges.ruler_schema), so the reply has one score in [0, 1] per trajectory.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr.engine import ChatRequest, Decoder

SERVER_KEY_ENV = "RLVR_JUDGE_SERVER_KEY"
SERVED_NAME = "smollm2-135m-judge"  # the model name requests use (judges.client.LOCAL_MODEL_ID)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m judges.server", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="inherited listening socket")
    parser.add_argument("--model", default="smollm2-135m", help="rlvr model name or directory")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args(argv)


def pin_ruler(request: ChatRequest, decoder: Decoder) -> ChatRequest:
    """`request` with ART's RULER schema pinned to its trajectories (judges.ruler_schema), sized
    to its max_tokens; any other request as it is."""
    from judges.ruler_schema import RulerBudgetError, pinned_ruler_format
    from rlvr.engine import ApiError, GrammarError, schema_of

    try:
        schema = schema_of(request.response_format)
    except GrammarError:
        return request  # answered as a 400 naming the field when the request is built
    if request.response_format is None or schema is None:
        return request
    messages = [m.model_dump(exclude_none=True) for m in request.messages]
    try:
        pinned = pinned_ruler_format(
            request.response_format,
            schema,
            messages,
            request.max_completion_tokens or request.max_tokens,
            lambda text: len(decoder.tokenizer.encode(text, add_special_tokens=False)),
        )
    except RulerBudgetError as error:
        raise ApiError(400, str(error)) from None
    return request if pinned is None else request.model_copy(update={"response_format": pinned})


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    key = os.environ.pop(SERVER_KEY_ENV, None)
    if not key:
        sys.exit(f"judge server: {SERVER_KEY_ENV} is not set (the bearer key)")
    listener = socket.socket(fileno=args.fd)
    os.environ["RLVR_TORCH_THREADS"] = str(args.threads)

    from rlvr.engine import serve_frozen

    serve_frozen(listener, args.model, SERVED_NAME, key, prepare=pin_ruler)


if __name__ == "__main__":
    from rlvr.lifetime import quick_teardown

    quick_teardown()  # a stopped judge server's process ends in a fraction of a second
    main()
