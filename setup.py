"""eventq's build: pyproject.toml says what the package is; this adds the
delivery path's modules compiled to C by mypyc (queues/compiled.py, and
docs/architecture.md "Compiled modules").

`EVENTQ_COMPILE=0` builds pure Python. So does a build that cannot compile
(mypyc refusing a module, no C compiler): it says why and goes on. A build
that compiled writes queues/compiled.json, the hash of each source it
compiled, by which queues/compiled.py runs the modules from their source
once a source has changed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# The shared library of the compiled modules, inside a package (not beside them).
GROUP = "queues.native"


def load_compiled() -> Any:
    """queues/compiled.py on its own (standard library only), not the
    package: what to compile, where the manifest goes, how a source is hashed."""
    path = ROOT / "queues" / "compiled.py"
    spec = importlib.util.spec_from_file_location("_eventq_compiled", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"setup.py: cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GUARD = load_compiled()
MANIFEST = GUARD.MANIFEST.relative_to(ROOT)


def source(module: str) -> Path:
    path: Path = GUARD.source_path(module)
    return path


def say(message: str) -> None:
    print(f"eventq build: {message}", file=sys.stderr)


def forget_compiled(modules: list[str]) -> None:
    """What an earlier build in place left beside the sources."""
    for module in [*modules, f"{GROUP}__mypyc"]:
        path = source(module)
        for extension in path.parent.glob(f"{path.stem}.*.so"):
            extension.unlink()
    (ROOT / MANIFEST).unlink(missing_ok=True)


def native_extensions(modules: list[str]) -> tuple[list[Any], str | None]:
    """mypyc's extensions for `modules`, or none and the reason."""
    if os.environ.get("EVENTQ_COMPILE") == "0":
        return [], "EVENTQ_COMPILE=0"
    try:
        from mypyc.build import mypycify  # noqa: PLC0415 (a pure build goes without)
    except ImportError as exc:
        return [], f"mypyc is not installed ({exc})"
    paths = [str(source(module).relative_to(ROOT)) for module in modules]
    try:
        extensions = mypycify(paths, opt_level="3", group_name=GROUP)
    except (Exception, SystemExit) as exc:  # mypyc exits on a type error
        return [], f"mypyc could not compile ({exc!r})"
    for extension in extensions:
        # A compiler's failure leaves the package whole (as Python), not broken.
        extension.optional = True
    return extensions, None


class BuildExt(build_ext):  # type: ignore[misc]
    """Builds the extensions, then writes the manifest of what was compiled."""

    def run(self) -> None:
        super().run()
        missing = [
            extension.name
            for extension in self.extensions
            if not Path(self.get_ext_fullpath(extension.name)).exists()
        ]
        if missing:
            say(f"the delivery path stays Python: the C compiler failed on {missing}")
            if self.inplace:
                forget_compiled(MODULES)
            return
        built = {module: GUARD.source_hash(source(module)) for module in MODULES}
        target = (ROOT if self.inplace else Path(self.build_lib)) / MANIFEST
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps({"modules": built}, indent=1) + "\n")
        say(f"{len(built)} modules compiled to C by mypyc")

    def get_outputs(self) -> list[str]:
        return [*super().get_outputs(), str(Path(self.build_lib) / MANIFEST)]


MODULES: list[str] = list(GUARD.COMPILED)
# setuptools runs this file for the package's metadata too: mypyc only for a build.
BUILDING = not {"build", "build_ext", "bdist_wheel", "editable_wheel", "install"}.isdisjoint(
    sys.argv[1:]
)
EXTENSIONS, REASON = native_extensions(MODULES) if BUILDING else ([], None)
if REASON is not None:
    say(f"the delivery path stays Python, slower: {REASON}")
    forget_compiled(MODULES)

setup(ext_modules=EXTENSIONS, cmdclass={"build_ext": BuildExt})
