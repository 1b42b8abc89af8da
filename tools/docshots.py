"""Screenshots of the built documentation site in a real browser: the site (`make docs`, in
site/) served on localhost and the results and benchmarks pages taken by headless Chromium, to
see that their pictures show as a reader sees them (`make docs-screenshot`).

    python -m tools.docshots SITE_DIR OUT_DIR

Chromium runs with a fresh profile and nothing in the background: no network beyond the local
server, no GPU, no sandbox (it runs as root in containers, where the sandbox cannot start)."""

from __future__ import annotations

import argparse
import functools
import http.server
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import BaseModel, ConfigDict

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package (`apt-get install chromium`)
WINDOW = (1280, 2000)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
TIMEOUT_S = 120


class Shot(BaseModel):
    """A page of the site and the screenshot file it is taken to."""

    model_config = ConfigDict(frozen=True)

    page: str  # its URL path under the site's root
    name: str  # the PNG's file name


# The pages with the pictures the docs hook draws (tools/docsite.py).
SHOTS = (
    Shot(page="results/", name="results.png"),
    Shot(page="results/benchmarks/", name="benchmarks.png"),
)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # a request line per file would bury the command's own output


@contextmanager
def serving(site: Path) -> Iterator[str]:
    """The site served on 127.0.0.1 on a free port, for as long as the block runs; yields its
    root URL."""
    handler = functools.partial(_Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def command(url: str, out: Path, profile: Path, chromium: Path = CHROMIUM) -> list[str]:
    """The Chromium command that takes `url`'s screenshot to `out` with the profile `profile`."""
    width, height = WINDOW
    return [
        str(chromium),
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--screenshot={out}",
        f"--window-size={width},{height}",
        url,
    ]


def screenshot(url: str, out: Path, chromium: Path = CHROMIUM) -> Path:
    """`url` as headless Chromium shows it, to the PNG `out`, from a fresh profile; a failure is
    one line with Chromium's last words."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlvr-chromium-") as profile:
        done = subprocess.run(
            command(url, out.resolve(), Path(profile), chromium),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    if done.returncode != 0 or not out.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{chromium}: no screenshot of {url} (exit {done.returncode}): {last}")
    return out


def take(site: Path, folder: Path, chromium: Path = CHROMIUM) -> list[Path]:
    """Every page of SHOTS from the built `site`, served locally, as PNGs in `folder`."""
    if not (site / "index.html").is_file():
        raise RuntimeError(f"{site}: no index.html; build the site first (make docs)")
    with serving(site) as root:
        return [screenshot(root + shot.page, folder / shot.name, chromium) for shot in SHOTS]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("site", type=Path, help="the built site (make docs writes site/)")
    parser.add_argument("out", type=Path, help="the folder the PNGs go in")
    parser.add_argument("--chromium", type=Path, default=CHROMIUM)
    args = parser.parse_args(argv)
    if not args.chromium.is_file():
        print(f"error: {args.chromium} not found; install it: apt-get install chromium")
        return 2
    try:
        for path in take(args.site, args.out, args.chromium):
            print(f"docs-screenshot: {path}")
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"error: {error}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
