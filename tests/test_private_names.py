"""Rooms by idea: no module under engine/, app/ or widgets/ uses another module's private (``_x``) names.

A name another module imports is part of its module's interface, so it is public and named so; a
module that needs a neighbour's private parts is split along the wrong line. Read with ast, imports
inside functions included: ``from m import _x`` and ``m._x`` where ``m`` is a project module bound by
an import (``import shardscope.engine.a.m as m``, ``from shardscope.engine.a import m``).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("engine", "app", "widgets")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return "shardscope." + ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether ``shardscope.<folder>.x.y`` names a module or package of the tree."""
    parts = name.split(".")
    if parts[0] != "shardscope" or len(parts) < 2 or parts[1] not in FOLDERS:
        return False
    where = ROOT.joinpath(*parts[1:])
    return where.with_suffix(".py").is_file() or (where / "__init__.py").is_file()


def _absolute(node: ast.ImportFrom, path: Path, own: str) -> str:
    if not node.level:
        return node.module or ""
    package = own.split(".") if path.name == "__init__.py" else own.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def private_uses(path: Path) -> list[str]:
    """``path``'s uses of another module's private names, as "line: module._name"."""
    own = _module_name(path)
    tree = ast.parse(path.read_text(), str(path))
    modules: dict[str, str] = {}  # local name -> project module it is bound to
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_module(alias.name):
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name] = alias.name  # `import a.b.c` is used as a.b.c.x
                for part in alias.name.split("."):
                    if _private(part):
                        found.append(f"{node.lineno}: {alias.name}")
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(node, path, own)
            if not _is_module(source) or source == own:
                continue
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{node.lineno}: {source}.{alias.name}")
                elif _is_module(f"{source}.{alias.name}"):
                    modules[alias.asname or alias.name] = f"{source}.{alias.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            target = ast.unparse(node.value)
            if target in modules and modules[target] != own:
                found.append(f"{node.lineno}: {modules[target]}.{node.attr}")
    return sorted(found, key=lambda use: int(use.split(":")[0]))


def test_no_module_uses_another_modules_private_names():
    offenders = {str(path.relative_to(ROOT)): uses
                 for folder in FOLDERS for path in sorted((ROOT / folder).rglob("*.py"))
                 if (uses := private_uses(path))}
    assert not offenders, "private names used from another module (make them public):\n" + "\n".join(
        f"{path}: {', '.join(uses)}" for path, uses in offenders.items())


def test_the_check_sees_each_form(tmp_path, monkeypatch):
    """The three forms are caught, and a module's own private names and dunders are not."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "engine" / "base").mkdir(parents=True)
    for init in (tmp_path / "engine" / "__init__.py", tmp_path / "engine" / "base" / "__init__.py"):
        init.write_text("")
    (tmp_path / "engine" / "base" / "units.py").write_text("_SECRET = 1\n__all__ = []\n")
    user = tmp_path / "engine" / "base" / "user.py"
    user.write_text("from shardscope.engine.base.units import _SECRET, __all__\n"
                    "from . import units\n"
                    "import shardscope.engine.base.units as u\n"
                    "_MINE = 2\n"
                    "def f():\n"
                    "    from .units import _SECRET as s\n"
                    "    return units._SECRET + u._SECRET + _MINE + s\n")
    assert private_uses(user) == [
        "1: shardscope.engine.base.units._SECRET",
        "6: shardscope.engine.base.units._SECRET",
        "7: shardscope.engine.base.units._SECRET",
        "7: shardscope.engine.base.units._SECRET",
    ]
