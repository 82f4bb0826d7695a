"""Speed goals live in bench/ (scripts that print ratios); a wall-clock limit left in a test only
catches a hang: at least 10 s, and a test whose own body measures elapsed time against a limit
is marked ``hang_bound`` (issue 37). This walks every test file's syntax tree for the limits:

- ``timeout=N`` of qtbot's waits and the suite's wait helpers (milliseconds) and of subprocess
  and thread waits (seconds), and the helpers' positional timeouts;
- ``time.perf_counter() + N`` / ``time.monotonic() + N`` deadlines;
- comparisons of a measured duration (``took``, ``elapsed``, ``perf_counter() - …``) with ``<`` N.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MS_CALLS = {"waitUntil", "waitSignal", "waitSignals", "waitExposed", "waitActive", "waitCallback", "wait_for",
            "wait_idle", "assertNotEmitted"}
POSITIONAL_MS = {"wait_for": 3, "wait_idle": 3}  # conftest.wait_for(qtbot, window, condition, timeout)
DURATION_WORDS = ("perf_counter", "monotonic", "took", "elapsed", "per_append")
FLOOR_S = 10.0


def _number(node) -> float | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def _name(func) -> str:
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def _marked_hang_bound(fn) -> bool:
    return any("hang_bound" in ast.unparse(d) for d in getattr(fn, "decorator_list", []))


def limits(source: str) -> list[tuple[int, float, str, bool]]:
    """(line, seconds, the code, inside a test marked hang_bound) for each wall-clock limit."""
    tree = ast.parse(source)
    module_marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                        and "hang_bound" in ast.unparse(n.value) for n in tree.body)
    found = []

    def visit(node, marked: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            marked = marked or _marked_hang_bound(node)
        seconds = None
        if isinstance(node, ast.Call):
            name, scale = _name(node.func), 1.0
            if name in MS_CALLS:
                scale = 0.001
            for kw in node.keywords:
                if kw.arg == "timeout" and _number(kw.value) is not None:
                    seconds = _number(kw.value) * scale
            pos = POSITIONAL_MS.get(name)
            if pos is not None and len(node.args) > pos and _number(node.args[pos]) is not None:
                seconds = _number(node.args[pos]) * 0.001
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left = ast.unparse(node.left)
            if ("perf_counter()" in left or "monotonic()" in left) and _number(node.right) is not None:
                seconds = _number(node.right)
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Lt, ast.LtE)):
            if any(w in ast.unparse(node.left) for w in DURATION_WORDS) and _number(node.comparators[0]) is not None:
                seconds = _number(node.comparators[0])
        if seconds is not None:
            found.append((node.lineno, seconds, ast.unparse(node)[:100], marked))
        for child in ast.iter_child_nodes(node):
            visit(child, marked)

    visit(tree, module_marked)
    return found


def test_the_walk_finds_each_kind_of_limit():
    code = '''
import time, pytest
def helper(qtbot):
    qtbot.waitUntil(lambda: True, timeout=2000)
@pytest.mark.hang_bound
def test_a(qtbot, window):
    wait_for(qtbot, window, lambda: True, 5_000)
    deadline = time.perf_counter() + 2.0
    took = 0.1
    assert took < 1.0
    proc.wait(timeout=30)
'''
    got = {(line, round(s, 3), marked) for line, s, _, marked in limits(code)}
    assert got == {(4, 2.0, False), (7, 5.0, True), (8, 2.0, True), (10, 1.0, True), (11, 30.0, True)}


def test_no_wall_clock_limit_under_10_s_and_measured_limits_are_marked():
    short, unmarked = [], []
    for path in sorted(TESTS.glob("*.py")):
        if path.name == Path(__file__).name:
            continue
        tree_limits = limits(path.read_text())
        for line, seconds, code, marked in tree_limits:
            where = f"{path.name}:{line}: {code}"
            if seconds < FLOOR_S:
                short.append(f"{where} ({seconds:g} s)")
            is_measured = any(w in code for w in ("took", "elapsed")) or code.startswith(("time.perf_counter() -",))
            if is_measured and not marked:
                unmarked.append(where)
    assert not short, "wall-clock limits under 10 s (speed goals belong in bench/):\n" + "\n".join(short)
    assert not unmarked, "measured-duration limits outside a test marked hang_bound:\n" + "\n".join(unmarked)
