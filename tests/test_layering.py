"""The dependency rules the user asked for, checked on the source: app → widgets, app → engine;
engine imports no Qt and no app; widgets import no engine and no app."""

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
