"""Keeping credentials out of everything a run writes or prints.

A credential is:
- the value of an environment variable named with a KEY / TOKEN / SECRET / PASSWORD component
  (OPENAI_API_KEY, WANDB_API_KEY, TINKER_API_KEY, HF_TOKEN, ...; values under MIN_LENGTH are
  left alone, they would blank out ordinary text);
- the value of a mapping key named like one (api_key, openai_key, auth_token, client_secret,
  authorization, password, ...);
- the password part of a URL (https://user:PASSWORD@host) and the value of a URL query parameter
  named like one (`?api-key=...`, `&access_token=...`, `&sig=...`);
- a key-shaped string (sk-..., ghp_..., hf_...), which may come from a provider's error message or
  a pasted option rather than from this machine.

Child processes rlvr starts get `child_env()`: the environment without credential variables.

Every output boundary runs its data through these: config.json (`RunConfig.public_dict`),
metrics.jsonl, summary.json and parquet (`rlvr.runs.store`), W&B (`rlvr.integrations`), error text
(ConfigError, the judge client, the CLI) and log records (`install_log_redaction`).
"""

from __future__ import annotations

import logging
import os
import re
import traceback
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

REDACTED = "[redacted]"
MIN_LENGTH = 8

_SECRET_ENV = re.compile(
    r"(?:^|_)(?:API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(?:_|$)", re.I
)
# Field names: `max_tokens`, `prompt_tokens` (plural) are counts, not credentials.
_SECRET_FIELD = re.compile(
    r"(?:(?:^|[_\-.])(?:api_?key|apikey|access_?key|secret_?key|private_?key|token|secret|"
    r"password|passwd|credentials?|authorization)|[_\-.]key)$",
    re.I,
)
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^/\s@]+(@)")
_URL_SECRET_PARAM = re.compile(
    r"([?&;][\w.\-]*(?:key|token|secret|password|passwd|sig|signature|auth|credential)"
    r"[\w.\-]*=)[^&#\s]+",
    re.I,
)
# Error text: anything prefix-shaped; data (config, metrics) only long provider-shaped keys, so a
# path such as `key_points_v2.jsonl` survives.
_KEY_SHAPES = re.compile(r"\b(?:sk|pk|rk|ghp|gsk|xai|key)[-_][A-Za-z0-9_\-]{8,}")
_PROVIDER_KEY = re.compile(
    r"\b(?:sk|pk|rk|ghp|gho|ghs|github_pat|gsk|xai|hf|tgp_v1)[-_][A-Za-z0-9_\-]{16,}"
)


def is_secret_env(name: str) -> bool:
    return bool(_SECRET_ENV.search(name))


def is_secret_field(name: str) -> bool:
    return bool(_SECRET_FIELD.search(name))


def secret_values(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Values of credential-named environment variables, longest first (so a key that contains
    another is replaced whole)."""
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if is_secret_env(k) and len(v) >= MIN_LENGTH}
    return tuple(sorted(values, key=len, reverse=True))


def redact_text(text: str, secrets: tuple[str, ...] | None = None) -> str:
    """`text` without credential values from the environment, URL passwords and URL query
    parameters named like credentials."""
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    text = _URL_PASSWORD.sub(rf"\1{REDACTED}\2", text)
    return _URL_SECRET_PARAM.sub(rf"\1{REDACTED}", text)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a child process rlvr starts (a local judge, a server): everything
    but credential variables (*_API_KEY, *_TOKEN, *_SECRET, ...), which no child of ours needs."""
    env = os.environ if environ is None else environ
    return {k: v for k, v in env.items() if not is_secret_env(k)}


def redact_error(text: str) -> str:
    """Error and log text: `redact_text`, and key-shaped strings too."""
    return _KEY_SHAPES.sub(REDACTED, redact_text(text))


def redact_data(value: Any, secrets: tuple[str, ...] | None = None) -> Any:
    """A JSON-like value with credentials removed: values under credential-named keys become
    REDACTED (None and "" stay, they hide nothing), strings lose credential values."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(value, str):
        return _PROVIDER_KEY.sub(REDACTED, redact_text(value, secrets))
    if isinstance(value, Mapping):
        return {
            k: REDACTED
            if isinstance(k, str) and is_secret_field(k) and value[k] not in (None, "")
            else redact_data(value[k], secrets)
            for k in value
        }
    if isinstance(value, list | tuple):
        return [redact_data(v, secrets) for v in value]
    return value


Cell = TypeVar("Cell")  # a table's cell: only text ones are changed, into text


def redact_rows(rows: Sequence[Mapping[str, Cell]]) -> list[dict[str, Cell | str]]:
    """Trajectory table rows (`rlvr.runs.store.trajectory_rows`) with credentials removed from every
    text cell; `logs`, which carries error text, also loses key-shaped strings."""
    secrets = secret_values()

    def clean(key: str, value: Cell) -> Cell | str:
        if not isinstance(value, str):
            return value
        return redact_error(value) if key == "logs" else redact_text(value, secrets)

    return [{k: clean(k, v) for k, v in row.items()} for row in rows]


def _redacted_args(args: tuple[object, ...]) -> tuple[object, ...]:
    return tuple(
        a
        if isinstance(a, int | float) or a is None or redact_error(str(a)) == str(a)
        else redact_error(str(a))
        for a in args
    )


def _redacted_record(record: logging.LogRecord) -> logging.LogRecord:
    """The record with credentials removed. A clean record is left as it is; otherwise the
    arguments are redacted one by one (formatters such as uvicorn's unpack them), and if the
    message still shows a credential it becomes the redacted text without arguments."""
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it later, unchanged
        return record
    if redact_error(message) != message:
        if isinstance(record.msg, str):
            record.msg = redact_error(record.msg)
        if isinstance(record.args, tuple):
            record.args = _redacted_args(record.args)
        try:
            message = record.getMessage()
        except Exception:
            message = ""
        if not message or redact_error(message) != message:
            record.msg, record.args = redact_error(message or str(record.msg)), None
    if record.exc_info and not record.exc_text:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if redact_error(text) != text:
            record.exc_text = redact_error(text)
    if record.stack_info:
        record.stack_info = redact_error(record.stack_info)
    return record


_installed = False
_hooked = False


def _redacting_excepthook(kind: type[BaseException], error: BaseException, tb: object) -> None:
    import sys

    # The traceback Python hands an excepthook is the error's own (`error.__traceback__`).
    text = "".join(traceback.format_exception(error))
    print(redact_error(text), file=sys.stderr, end="", flush=True)


def install_redaction() -> None:
    """Log redaction plus an exception hook that prints tracebacks without credentials: what
    every `rlvr` command installs first, so no command can print a key. Idempotent."""
    import sys

    global _hooked
    install_log_redaction()
    if not _hooked:
        sys.excepthook = _redacting_excepthook
        _hooked = True


def install_log_redaction() -> None:
    """From now on every log record of this process (any logger, any handler) is created with
    credentials removed from its message and its traceback text. Idempotent."""
    global _installed
    if _installed:
        return
    make = logging.getLogRecordFactory()
    logging.setLogRecordFactory(lambda *a, **k: _redacted_record(make(*a, **k)))
    _installed = True
