"""The modules of the delivery path compiled to C, and the guard that keeps a
compiled build from running code its source no longer says.

The build (setup.py) compiles the modules of `COMPILED` with mypyc: the
parsing of each request, the long poll and the stream, the queues. They are
the same modules run compiled: mypyc turns their type annotations into C
types and their calls to each other into C calls, and the server spends
6-16 % less CPU per delivered event (docs/architecture.md, "Compiled
modules"). A build that cannot compile (no C compiler, `EVENTQ_COMPILE=0`)
installs them as Python. One module of `generation` is compiled, the
notice's parsing and validation (`generation.notice`: every notice the
server takes passes through it), so `generation` imports this module, and
nothing else of `queues`, to install the guard first.

A compiled module is an extension file beside its source, which Python's
import prefers. Once the source changes (an edit, a `git checkout`) the
extension is stale: the build wrote the hash of each source it compiled
(`MANIFEST`), and `install`, run by `queues`, `generation` and `server`
before any of these modules is imported, loads all of them from their source
when one source differs, or when `EVENTQ_PURE_PYTHON=1`, and logs why. All,
not only the changed ones: compiled modules call each other's code directly.

Standard library only, as the rest of `queues`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

# The compiled modules (setup.py reads this tuple). Every class any other
# module or test subclasses stays out of it: an interpreted class cannot
# inherit from a compiled one.
COMPILED = (
    "generation.notice",
    "queues.client",
    "queues.event_queue",
    "queues.narrow",
    "queues.payload",
    "queues.positions",
    "queues.registry",
    "queues.specialize",
    "server.delivering",
    "server.delivery.consumer",
    "server.delivery.eventlog",
    "server.delivery.longpoll",
    "server.handlers.internal",
    "server.handlers.lean",
    "server.handlers.longpoll_flow",
    "server.handlers.poll",
    "server.handlers.stream",
    "server.http.auth",
    "server.http.http1",
    "server.http.params",
    "server.http.ratelimit",
    "server.http.responses",
    "server.http.sessions",
    "server.http.turns",
    "server.observability.pollrecords",
    "server.routes",
    "server.telling",
)

# What the build wrote beside this file: {"modules": {name: sha256 of the
# source it compiled}}.
MANIFEST = Path(__file__).with_name("compiled.json")
# The directory holding the packages.
ROOT = Path(__file__).resolve().parent.parent

log = logging.getLogger("eventq.compiled")


class _Guard:
    """This process' guard: whether `install` has run, and its finder."""

    checked = False
    finder: _SourceFinder | None = None


def source_path(module: str, root: Path = ROOT) -> Path:
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale_modules(manifest: Path = MANIFEST, root: Path = ROOT) -> list[str] | None:
    """The compiled modules whose source differs from what was compiled;
    None when nothing was compiled (no manifest, or one unreadable)."""
    try:
        built = json.loads(manifest.read_text())["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(built, dict):
        return None
    stale = []
    for module, digest in built.items():
        path = source_path(module, root)
        try:
            if source_hash(path) != digest:
                stale.append(module)
        except FileNotFoundError:
            continue  # installed without its source: the compiled one is all there is
        except OSError:
            stale.append(module)
    return stale


def is_compiled(module: ModuleType) -> bool:
    """Whether `module` was loaded from an extension (compiled) file."""
    origin = getattr(module, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' sources, ahead of their extensions."""

    def __init__(self, modules: Sequence[str], root: Path):
        self.modules = frozenset(modules)
        self.root = root

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        source = source_path(fullname, self.root)
        if not source.is_file():
            return None
        return importlib.util.spec_from_file_location(fullname, source)


def run_from_source(modules: Sequence[str] = COMPILED, root: Path = ROOT) -> None:
    """From now on, import `modules` from their sources."""
    if _Guard.finder is None:
        _Guard.finder = _SourceFinder(modules, root)
        sys.meta_path.insert(0, _Guard.finder)


def _names(modules: Sequence[str]) -> str:
    return ", ".join(modules[:3]) + (", ..." if len(modules) > 3 else "")


@functools.cache
def describe() -> str:
    """How the compiled modules run in this process (once: it does not change
    once they are imported), for the server's log and stats."""
    import queues.registry  # noqa: PLC0415 (the question is how it was loaded)

    if is_compiled(queues.registry):
        return f"compiled to C ({len(COMPILED)} modules)"
    if os.environ.get("EVENTQ_PURE_PYTHON") == "1":
        return "Python (EVENTQ_PURE_PYTHON=1)"
    stale = stale_modules()
    if stale:
        return f"Python: the compiled modules are stale ({_names(stale)})"
    return "Python (this build compiled nothing: see setup.py)"


def install() -> None:
    """Load the compiled modules from their sources if they are stale or
    `EVENTQ_PURE_PYTHON=1` (once per process; before any of them is imported)."""
    if _Guard.checked:
        return
    _Guard.checked = True
    if os.environ.get("EVENTQ_PURE_PYTHON") == "1":
        run_from_source()
        return
    stale = stale_modules()
    if stale is None:
        # Nothing compiled by this build: an extension file left by an
        # earlier build is no more current than its source.
        run_from_source()
    elif stale:
        run_from_source()
        log.warning(
            "compiled modules differ from their source (%s): all of them run as"
            " Python, slower; rebuild with `pip install -e .` (or deploy/bootstrap.sh)",
            _names(stale),
        )
