"""The compiled modules (queues/compiled.py, setup.py): a build compiles them,
and a stale one never runs code its source no longer says."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from queues import compiled
from queues.compiled import COMPILED, source_hash, stale_modules

REPO = Path(__file__).resolve().parents[2]

# Prints where two compiled modules came from, and how the delivery path runs.
WHERE = """\
import queues.compiled as c, queues.narrow as n, queues.registry as r
print(n.__file__)
print(r.__file__)
print(c.describe())
"""


def run_python(script: str, root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` run with `root` first on the path, in an environment of
    none of ours but `env`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTQ_", "PYTHON"))}
    return subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=root,
        env={**clean, **env},
        timeout=60,
        check=True,
    )


def where(root: Path, **env: str) -> tuple[list[str], str]:
    """The files `WHERE` printed, its last line, and what it logged, run
    with `root` first on the path."""
    done = run_python(WHERE, root, **env)
    *files, described = done.stdout.splitlines()
    return files, described + "\n" + done.stderr


def manifest(root: Path, modules: dict[str, str]) -> Path:
    path = root / "queues" / "compiled.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"modules": modules}))
    return path


def test_stale_modules_are_those_whose_source_changed(tmp_path):
    source = tmp_path / "queues" / "narrow.py"
    source.parent.mkdir()
    source.write_text("X = 1\n")
    path = manifest(tmp_path, {"queues.narrow": source_hash(source), "queues.gone": "0" * 64})
    # A module installed without its source: its compiled form is all there is.
    assert stale_modules(path, tmp_path) == []
    source.write_text("X = 2\n")
    assert stale_modules(path, tmp_path) == ["queues.narrow"]


@pytest.mark.parametrize("text", [None, "", "{}", "[]", '{"modules": []}', "not json"])
def test_no_manifest_or_an_unreadable_one_means_nothing_compiled(tmp_path, text):
    path = tmp_path / "queues" / "compiled.json"
    if text is not None:
        manifest(tmp_path, {})
        path.write_text(text)
    assert stale_modules(path, tmp_path) is None


def test_this_build_compiled_every_listed_module():
    """The build `pip install -e .` made (deploy/bootstrap.sh runs it again
    when a compiled module's source changes)."""
    built = json.loads(compiled.MANIFEST.read_text())["modules"]
    assert sorted(built) == sorted(COMPILED)
    assert stale_modules() == []
    files, described = where(REPO)
    assert all(name.endswith(".so") for name in files), files
    assert described.startswith(f"compiled to C ({len(COMPILED)} modules)\n")


def test_pure_python_on_request():
    files, described = where(REPO, EVENTQ_PURE_PYTHON="1")
    assert files == [str(REPO / "queues" / "narrow.py"), str(REPO / "queues" / "registry.py")]
    assert described.startswith("Python (EVENTQ_PURE_PYTHON=1)\n")


def test_a_changed_source_runs_every_compiled_module_from_source(tmp_path):
    """A copy of the built package, one of whose sources then changes: that
    module and all the others run as Python, with a warning saying so."""
    copy = tmp_path / "queues"
    shutil.copytree(REPO / "queues", copy, ignore=shutil.ignore_patterns("__pycache__"))
    files, described = where(tmp_path)
    assert all(Path(name).parent == copy and name.endswith(".so") for name in files), files
    with (copy / "narrow.py").open("a") as source:
        source.write("\nCHANGED = True\n")
    files, described = where(tmp_path)
    assert files == [str(copy / "narrow.py"), str(copy / "registry.py")]
    assert described.startswith("Python: the compiled modules are stale (queues.narrow)\n")
    assert "compiled modules differ from their source (queues.narrow)" in described
    assert "rebuild with `pip install -e .`" in described


# A producer's process: `generation` alone, nothing of the server's first.
NOTICE_FIRST = """\
import generation.notice as g
print(g.__file__)
"""


def test_a_producer_importing_the_notice_first_is_guarded_too(tmp_path):
    """`generation.notice` is compiled; `generation` installs the guard
    before it is imported, so a stale build runs its source even in a
    process that imports nothing else of ours."""

    def notice_file(root: Path, **env: str) -> str:
        return run_python(NOTICE_FIRST, root, **env).stdout.strip()

    assert notice_file(REPO).endswith(".so")
    assert notice_file(REPO, EVENTQ_PURE_PYTHON="1") == str(REPO / "generation" / "notice.py")
    # A copy whose queues/narrow.py changed: every compiled module is stale.
    for package in ("queues", "generation"):
        shutil.copytree(
            REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    assert notice_file(tmp_path).endswith(".so")
    with (tmp_path / "queues" / "narrow.py").open("a") as source:
        source.write("\nCHANGED = True\n")
    assert notice_file(tmp_path) == str(tmp_path / "generation" / "notice.py")
