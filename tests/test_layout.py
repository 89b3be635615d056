"""The direction of imports (docs/architecture.md, "Packages and the direction of
imports")."""

from __future__ import annotations

import ast
import graphlib
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
STDLIB = set(sys.stdlib_module_names)

# package -> third-party or project packages it may import anywhere
ALLOWED = {
    "queues": {"queues"},
    "generation": {"generation", "orjson"},
    "apply_events": {"apply_events", "generation"},
    "server": {
        "server", "queues", "generation", "apply_events",
        "tornado", "pika", "psycopg", "psycopg_pool", "orjson",
        "pyarrow", "prometheus_client", "uvloop",
    },
    # stdlib, pyspark, plotting; nothing of ours (the log format is checked by a
    # contract test, not imported). Plus pyarrow,
    # the format Spark hands results to the driver in (DataFrame.toArrow):
    # the small tables are built and written from the driver with it.
    "analytics": {"analytics", "pyspark", "pyarrow", "matplotlib"},
}  # fmt: skip
# imports allowed only in some modules of a package
ONLY_IN = {
    # the compiled modules' guard (queues/compiled.py), before generation.notice
    ("generation", "queues"): {"generation/__init__.py"},
    ("generation", "pika"): {"generation/publisher.py"},
    # actions, and the after-commit hook of send_event_on_commit
    ("generation", "psycopg"): {
        "generation/accounts.py",
        "generation/actions/",
        "generation/eventlog.py",
        "generation/send.py",
    },
    ("apply_events", "psycopg"): {"apply_events/fetch/"},
    # llhttp, for the request heads of eventq's own connections
    ("server", "httptools"): {"server/http/http1.py"},
    # rendering message content, for the actions that store it
    ("generation", "markdown_it"): {"generation/markdown.py"},
}


def imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_packages_import_only_what_the_design_allows(package):
    assert modules(package), f"{package} has no modules"
    for path in modules(package):
        relative = path.relative_to(REPO).as_posix()
        for name in imports(path) - STDLIB:
            only = ONLY_IN.get((package, name))
            if only is not None:
                # an entry ending in "/" allows a whole directory
                allowed = any(
                    relative == entry or (entry.endswith("/") and relative.startswith(entry))
                    for entry in only
                )
                assert allowed, f"{relative} imports {name}; only {only} may"
            else:
                assert name in ALLOWED[package], f"{relative} imports {name}"


def test_generation_takes_only_the_guard_of_queues():
    """`generation/__init__.py` may import `queues.compiled`, nothing else of it."""
    tree = ast.parse((REPO / "generation" / "__init__.py").read_text())
    taken = {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("queues")
        for alias in node.names
    }
    taken |= {
        (alias.name, None)
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("queues")
    }
    assert taken <= {("queues", "compiled"), ("queues.compiled", "install")}, taken


def test_nothing_imports_the_server():
    for package in ("queues", "generation", "apply_events"):
        for path in modules(package):
            assert "server" not in imports(path), path


def test_every_package_is_installed_by_pip_install():
    """`pip install .` ships exactly the packages of the source tree."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {
        init.parent.relative_to(REPO).as_posix().replace("/", ".")
        for package in ALLOWED
        for init in (REPO / package).rglob("__init__.py")
    }
    mapped = set(config.get("package-dir", {}))  # data-only packages, e.g. migrations
    assert listed == found | mapped


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, known: set[str]) -> set[str]:
    """The modules of `known` that `path` imports anywhere: at the top, in a
    function, under `if TYPE_CHECKING:` (mypy follows those too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            # `from server import app` imports the module server.app
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found & known - {name}


def test_the_server_modules_import_each_other_in_one_direction():
    """No circle among server/'s modules: the handlers see the server through
    a narrow interface below them (server/interface.py), not server.app."""
    paths = modules("server")
    known = {module_name(path) for path in paths}
    graph = {module_name(path): imported_modules(path, known) for path in paths}
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        # graphlib lists each module before the one that imports it
        circle = " imports ".join(reversed(exc.args[1]))
        pytest.fail(f"server/ modules import each other in a circle: {circle}")


# server/'s rooms, from the top down (docs/architecture.md, "The server's
# rooms"): a module may import, at run time, modules of its own room and of
# the rooms below it, never above. Type-only imports (under TYPE_CHECKING) are
# not dependencies at run time: server/interface.py, the handlers' view of the
# server, names the types of every room that way from the bottom.
ROOMS = (
    ("admin", ("server/admin/", "server/__main__.py")),
    (
        "assembly",
        (
            "server/app.py",
            "server/delivering.py",
            "server/upkeep.py",
            "server/listener.py",
            "server/telling.py",
            "server/routes.py",
            "server/openapi.py",
        ),
    ),
    ("handlers", ("server/handlers/",)),
    ("scheduling", ("server/scheduling/",)),
    ("notifications", ("server/notifications/",)),
    ("durability", ("server/durability/",)),
    ("http", ("server/http/",)),
    ("delivery", ("server/delivery/",)),
    ("observability", ("server/observability/",)),
    ("database", ("server/database/",)),
    (
        "foundation",
        (
            "server/__init__.py",
            "server/config.py",
            "server/errors.py",
            "server/interface.py",
            "server/version.py",
        ),
    ),
)


def room_of(relative: str) -> int:
    for rank, (_, places) in enumerate(ROOMS):
        if any(relative == p or (p.endswith("/") and relative.startswith(p)) for p in places):
            return rank
    raise AssertionError(f"{relative} is in no room: add it to ROOMS (and docs/architecture.md)")


def runtime_imports(path: Path, known: set[str]) -> set[str]:
    """`imported_modules` less the imports under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "TYPE_CHECKING",
            "typing.TYPE_CHECKING",
        ):
            node.body = [ast.Pass()]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found & known


def test_every_server_module_is_in_a_room_and_imports_only_its_own_and_those_below():
    paths = modules("server")
    known = {module_name(path) for path in paths}
    where = {module_name(path): path.relative_to(REPO).as_posix() for path in paths}
    upward = []
    for path in paths:
        relative = path.relative_to(REPO).as_posix()
        rank = room_of(relative)
        for target in sorted(runtime_imports(path, known) - {module_name(path)}):
            target_rank = room_of(where[target])
            if target_rank < rank:
                upward.append(
                    f"{relative} ({ROOMS[rank][0]}) imports {target} ({ROOMS[target_rank][0]})"
                )
    assert not upward, "imports up the rooms:\n" + "\n".join(upward)


def test_the_rooms_test_finds_an_import_up_the_rooms(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\nfrom server.app import x\n"
        "if TYPE_CHECKING:\n    from server.routes import y\n"
    )
    assert runtime_imports(module, {"server.app", "server.routes"}) == {"server.app"}


# A module of the packages holds one topic; past about 600 lines it is split
# (docs/architecture.md), unless it says here why not.
MAX_MODULE_LINES = 650
LONGER_BY_DESIGN = {
    # HTTP1Protocol is one connection's state machine (about 420 lines):
    # cutting the head, handing a body to its delegate, framing the answer
    # and handing the connection to Tornado share one buffer and its state;
    # apart, each would reach into the other's.
    "server/http/http1.py": 860,
}


def test_no_module_is_much_over_600_lines_unless_it_says_why():
    long = []
    for package in ALLOWED:
        for path in modules(package):
            relative = path.relative_to(REPO).as_posix()
            lines = len(path.read_text().splitlines())
            if lines > LONGER_BY_DESIGN.get(relative, MAX_MODULE_LINES):
                long.append(f"{relative}: {lines} lines")
    assert not long, "split these, or say why in LONGER_BY_DESIGN:\n" + "\n".join(long)
    for relative in LONGER_BY_DESIGN:
        assert (REPO / relative).exists(), f"{relative} is gone: drop it from LONGER_BY_DESIGN"
        assert len((REPO / relative).read_text().splitlines()) > MAX_MODULE_LINES, (
            f"{relative} is short now: drop it from LONGER_BY_DESIGN"
        )
