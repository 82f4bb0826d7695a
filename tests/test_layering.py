"""The dependency rules the user asked for, checked on the source: app → widgets, app → engine;
engine imports no Qt and no app; widgets import no engine and no app; engine and app rooms ranked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {
    "engine": ("PySide6", "pyqtgraph", "shiboken6", "app", "widgets"),
    "widgets": ("engine", "app"),
}


def _top(module: str) -> str:
    """The project package a module name belongs to: shardscope.engine.x -> engine."""
    parts = module.split(".")
    return parts[1] if parts[0] == "shardscope" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(_top(node.module))
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_keeps_its_dependency_direction(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(_imports(path) & set(FORBIDDEN[package]))
        for path in (ROOT / package).rglob("*.py")
    }
    assert not {k: v for k, v in offenders.items() if v}


# engine/'s rooms, lowest first: a module imports only its own room and rooms ranked below it
# (imports inside functions count too: deferring an import does not change who depends on whom).
ENGINE_RANKS = [
    ("base",),
    ("layout", "synth"),
    ("knobs",),
    ("measure",),
    ("stream",),
    ("experts",),
    ("devices",),
    ("output",),
    ("runs",),
    ("search",),
    ("cli",),
]
RANK = {room: i for i, rooms in enumerate(ENGINE_RANKS) for room in rooms}


def _rooms_imported(path: Path, package: str, ranks: dict[str, int]) -> set[str]:
    """The rooms of shardscope.<package> that ``path`` imports (inside functions too)."""
    rooms = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[:2] == ["shardscope", package] and len(parts) > 2 and parts[2] in ranks:
                rooms.add(parts[2])
    return rooms


def test_engine_rooms_are_the_ranked_list():
    rooms = {p.name for p in (ROOT / "engine").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(RANK)


def _upward_imports(tree: str, rank: dict[str, int], room: str) -> dict[str, list[str]]:
    """Each module of ``tree``/``room`` that imports a room of ``tree`` ranked as high or higher."""
    offenders = {}
    for path in (ROOT / tree / room).glob("*.py"):
        higher = {r for r in _rooms_imported(path, tree, rank) if r != room and rank[r] >= rank[room]}
        if higher:
            offenders[path.name] = sorted(higher)
    return offenders


@pytest.mark.parametrize("room", sorted(RANK))
def test_engine_room_imports_only_lower_rooms(room):
    assert not _upward_imports("engine", RANK, room)


def test_engine_keeps_its_modules_in_rooms():
    """A module lives in the room of its idea, not at engine/'s top. (How big a module may grow is
    no test's business: tests/test_private_names.py checks that modules split by idea, not by length,
    since a split along the wrong line shows as one module using another's private names.)"""
    top = [p.name for p in (ROOT / "engine").glob("*.py")]
    assert len(top) <= 3, top


# app/'s rooms, lowest first, ranked the same way: the window at the top imports every room,
# the run view never the search dialogs. __init__ and __main__ stay at app/'s top.
APP_RANKS = [
    ("base",),
    ("devices", "runs", "profiles"),
    ("run_view",),
    ("experts",),
    ("rounds",),
    ("files", "search"),
    ("window",),
]
APP_RANK = {room: i for i, rooms in enumerate(APP_RANKS) for room in rooms}


def test_app_rooms_are_the_ranked_list():
    rooms = {p.name for p in (ROOT / "app").iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert rooms == set(APP_RANK)
    assert sorted(p.name for p in (ROOT / "app").glob("*.py")) == ["__init__.py", "__main__.py"]


@pytest.mark.parametrize("room", sorted(APP_RANK))
def test_app_room_imports_only_lower_rooms(room):
    assert not _upward_imports("app", APP_RANK, room)


def test_every_room_is_an_installed_package():
    """setup.py's discovery (what a build installs) finds every room under its shardscope. name."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("shardscope_setup", ROOT / "setup.py")
    setup = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(setup)  # not __main__: finds the packages, builds nothing
    packages = set(setup.PACKAGES)
    assert {f"shardscope.app.{room}" for room in APP_RANK} <= packages
    assert {f"shardscope.engine.{room}" for room in RANK} <= packages
    assert {"shardscope.engine", "shardscope.app", "shardscope.widgets"} <= packages
    assert not {p for p in packages if p.split(".")[1] not in ("engine", "app", "widgets")}
