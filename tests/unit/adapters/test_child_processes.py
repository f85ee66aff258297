"""Every child process the Worker starts is started without Python code running in
the child: subprocess.Popen with no preexec_fn (vfork and exec), as
adapters/executor/spawn.py does. The loop's own subprocess support is never used:
uvloop's forks and runs the interpreter's after-fork hooks in the child, which hang
on a lock another thread held at the fork, and the loop with them (libuv's spawn
waits for the exec). The rule is checked over the whole tree, so a new module is
covered without editing this file."""
from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
LOOP_SPAWNERS = {"create_subprocess_exec", "create_subprocess_shell", "subprocess_exec", "subprocess_shell"}
SOURCES = sorted([*(ROOT / "blockx").rglob("*.py"), *(ROOT / "executor" / "blockx_executor").rglob("*.py")])


def _offences(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name in LOOP_SPAWNERS:
            found.append(f"line {node.lineno}: {name}() forks through the event loop")
        if name == "Popen" and any(k.arg == "preexec_fn" for k in node.keywords):
            found.append(f"line {node.lineno}: Popen(preexec_fn=...) runs Python in the forked child")
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_child_is_started_with_python_running_after_the_fork(path):
    assert _offences(ast.parse(path.read_text(), str(path))) == []


def test_the_rule_catches_both_ways():
    bad = ast.parse("async def f(loop):\n    await asyncio.create_subprocess_exec('x')\n"
                    "    subprocess.Popen(['x'], preexec_fn=os.setsid)\n")
    assert len(_offences(bad)) == 2
