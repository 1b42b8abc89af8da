"""The local judge engine's server: rlvr's own batched engine (rlvr.policy) serving the judge model
over the OpenAI-compatible endpoint, with structured output (`response_format` -> a grammar).

`judges.engine.LocalEngine` runs it as a child process, `python -m judges.server --fd N ...`: the
listening socket is bound by the parent and inherited (no port is picked, released and bound
again, so no other process can take it in between), and the bearer key arrives in the environment
(`SERVER_KEY_ENV`), never on the command line, which other users can read.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys

SERVER_KEY_ENV = "RLVR_JUDGE_SERVER_KEY"
SERVED_NAME = "smollm2-135m-judge"  # the model name requests use (judges.client.LOCAL_MODEL_ID)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m judges.server", description=__doc__)
    parser.add_argument("--fd", type=int, required=True, help="inherited listening socket")
    parser.add_argument("--model", default="smollm2-135m", help="rlvr model name or directory")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    key = os.environ.pop(SERVER_KEY_ENV, None)
    if not key:
        sys.exit(f"judge server: {SERVER_KEY_ENV} is not set (the bearer key)")
    listener = socket.socket(fileno=args.fd)
    os.environ["RLVR_TORCH_THREADS"] = str(args.threads)

    import uvicorn

    from rlvr.policy.frozen import frozen_sampler
    from rlvr.policy.models import resolve_model
    from rlvr.policy.server import ApiError, Route, create_app, serve

    engine = frozen_sampler(resolve_model(args.model))

    def route(name: str) -> Route:
        if name != SERVED_NAME:
            raise ApiError(
                404, f"model: '{name}': this judge serves '{SERVED_NAME}'", "not_found_error"
            )
        return Route(engine=engine, step=None)

    app = create_app(route, lambda: [SERVED_NAME], api_key=key)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=600)
    serve(uvicorn.Server(config), [listener])


if __name__ == "__main__":
    from rlvr.lifetime import quick_teardown

    quick_teardown()  # a stopped engine's process ends in a fraction of a second
    main()
