"""docs/modules.md's "Who owns what" lists every module of blockx/ and of the executor,
each with the first sentence of its own header (the module docstring; in a
Cython .pyx the docstring or the comment block it opens with). The header is the
one source: change it, and the page follows with

    .venv/bin/python tests/unit/test_who_owns_what.py --write

which rewrites that block in place. A module with no header fails here too, and
so does an entry for a module that no longer exists."""
from __future__ import annotations

import ast
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "modules.md"
TREES = ("blockx", "executor/blockx_executor")
GENERATED = re.compile(r"_pb2(_grpc)?\.py$")       # protoc's output, not committed
HEADING = "## Who owns what"
PATH_WIDTH = 44
WIDTH = 110


def modules() -> list[pathlib.Path]:
    out = []
    for tree in TREES:
        for pattern in ("*.py", "*.pyx"):
            out.extend(p for p in (ROOT / tree).rglob(pattern)
                       if not GENERATED.search(p.name) and "__pycache__" not in p.parts)
    return sorted(out, key=lambda p: str(p.relative_to(ROOT)))


def header(path: pathlib.Path) -> str | None:
    """The module's header text, or None when it has none."""
    text = path.read_text()
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text))
    m = re.match(r'\s*(?:#[^\n]*\n\s*)*[rR]?"""(.*?)"""', text, re.S)
    if m:
        return m.group(1)
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        if not line.startswith("# cython:"):
            lines.append(line[1:].strip())
    return "\n".join(lines).strip() or None


def first_sentence(text: str) -> str:
    para = " ".join(text.strip().split("\n\n")[0].split())
    m = re.match(r"(.+?(?<!e\.g)(?<!i\.e)[.!?])(?=\s|$)", para)
    return m.group(1) if m else para


def entries() -> list[tuple[str, str]]:
    out = []
    for path in modules():
        text = header(path)
        if text is None:
            if not path.read_text().strip():
                continue            # an empty __init__.py: a package marker, nothing to own
            raise AssertionError(f"{path.relative_to(ROOT)} has no header docstring: say what it holds")
        out.append((str(path.relative_to(ROOT)), first_sentence(text)))
    return out


def block(items: list[tuple[str, str]]) -> str:
    lines = []
    for path, what in items:
        first, *rest = textwrap.wrap(what, WIDTH - PATH_WIDTH) or [""]
        if len(path) >= PATH_WIDTH:
            lines.append(path)
            lines.append(" " * PATH_WIDTH + first)
        else:
            lines.append(path.ljust(PATH_WIDTH) + first)
        lines.extend(" " * PATH_WIDTH + r for r in rest)
    return "\n".join(lines)


def page_block(text: str) -> tuple[int, int]:
    """The [start, end) offsets of the code block under the heading."""
    at = text.index(HEADING)
    start = text.index("```\n", at) + 4
    end = text.index("```\n", start)
    return start, end


def test_every_module_has_a_header_and_the_page_lists_it():
    text = PAGE.read_text()
    start, end = page_block(text)
    want = block(entries()) + "\n"
    got = text[start:end]
    if got != want:
        listed = {line.split()[0] for line in got.splitlines() if line and not line.startswith(" ")}
        known = {p for p, _ in entries()}
        raise AssertionError(
            "docs/modules.md's 'Who owns what' differs from the modules' headers "
            f"(missing: {sorted(known - listed)[:10]}, gone: {sorted(listed - known)[:10]}); "
            "rewrite it with: .venv/bin/python tests/unit/test_who_owns_what.py --write")


def test_the_first_sentence_is_the_summary():
    assert first_sentence("TimerHeap: timers invalidated lazily. Theory: ...") == "TimerHeap: timers invalidated lazily."
    assert first_sentence("A (e.g. x) thing of blockx.cli.text.\n\nMore.") == "A (e.g. x) thing of blockx.cli.text."
    assert first_sentence("No full stop\nacross lines") == "No full stop across lines"


def test_a_module_without_a_header_is_refused(tmp_path, monkeypatch):
    (tmp_path / "blockx").mkdir()
    (tmp_path / "blockx" / "bare.py").write_text("x = 1\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    monkeypatch.setattr(sys.modules[__name__], "TREES", ("blockx",))
    try:
        entries()
    except AssertionError as exc:
        assert "blockx/bare.py has no header docstring" in str(exc)
    else:
        raise AssertionError("a module without a header passed")


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: tests/unit/test_who_owns_what.py --write")
    text = PAGE.read_text()
    start, end = page_block(text)
    PAGE.write_text(text[:start] + block(entries()) + "\n" + text[end:])
