"""Comments and docstrings cite only what a reader of this repository can open.

No comment, docstring or string of the source, the tests, the benchmarks, the
proto or the build files, and no line of README.md or docs/, names a document outside the repository (DESIGN.md, a
spec file, "the spec", "section 3a", a "§") or an issue number ("issue 15 part
2" fences): what such a citation meant is said in the code's own words, or
points to README.md / docs/ here. Python and Cython sources are read token by
token, so only comments and strings are judged (a variable called `spec` is
code, not a citation); the other files line by line."""
from __future__ import annotations

import io
import pathlib
import re
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TREES = ("blockx", "executor", "tests", "bench", "proto")
FILES = ("Makefile", "pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
# docs/*.md is read too; docs/incoming/ holds other branches' notes until they are folded into the pages.
DOC_PAGES = "docs"
SUFFIXES = {".py", ".pyx", ".pxd", ".pyi", ".proto", ".toml", ".cfg", ".sh", ".yml", ".yaml"}
GENERATED = re.compile(r"(_pb2(_grpc)?\.pyi?|\.c)$")

CITATION = re.compile(
    r"DESIGN(\.md|\b)"                        # the design document, by name
    r"|\bspec/|\bworker\.md\b|\bcall-execution\.md\b"   # the spec files
    r"|§"                                     # a section sign
    r"|\b[Ss]ection \d+[a-z]?\b"              # "section 3a"
    r"|\b[Ii]ssue #?\d+"                      # an issue number
    r"|\b[Tt]he spec\b|\bspec['’]s\b|(?<!\w)\(spec\b|\bspec:|\bspec \"|\bspec order\b"
    r"|\bper spec\b|\bin spec\b")

# Files whose citations are being rewritten elsewhere, exempt until that rewrite
# lands (none today); a file that no longer exists fails here.
PENDING: tuple[str, ...] = ()
PENDING_DIRS: tuple[str, ...] = ()
SELF = pathlib.Path(__file__).resolve()


def _pending(rel: str) -> bool:
    return rel in PENDING or rel.startswith(PENDING_DIRS)


def files() -> list[pathlib.Path]:
    out = [ROOT / f for f in FILES if (ROOT / f).exists()]
    out += sorted((ROOT / DOC_PAGES).glob("*.md"))
    for tree in TREES:
        for p in (ROOT / tree).rglob("*"):
            if p.is_file() and p.suffix in SUFFIXES and not GENERATED.search(p.name) \
                    and "__pycache__" not in p.parts and p.resolve() != SELF:
                out.append(p)
    return sorted(out)


def prose(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line, text) of what a reader reads as prose: comments and strings of a
    Python or Cython source, every line of anything else."""
    text = path.read_text(errors="replace")
    if path.suffix not in (".py", ".pyx", ".pxd", ".pyi"):
        return list(enumerate(text.splitlines(), 1))
    out = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING):
                for i, line in enumerate(tok.string.splitlines()):
                    out.append((tok.start[0] + i, line))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return list(enumerate(text.splitlines(), 1))      # not lexable as Python: judge every line
    return out


def citations(path: pathlib.Path) -> list[str]:
    rel = str(path.relative_to(ROOT))
    return [f"{rel}:{n}: {line.strip()[:120]}" for n, line in prose(path) if CITATION.search(line)]


def test_no_comment_cites_a_document_outside_the_repository_or_an_issue():
    found = [hit for p in files() if not _pending(str(p.relative_to(ROOT))) for hit in citations(p)]
    assert not found, ("say what these mean in the code's own words (or point to README.md):\n"
                       + "\n".join(found))


def test_the_pending_files_exist():
    gone = [f for f in PENDING if not (ROOT / f).exists()]
    assert not gone, f"no longer in the tree, drop them from PENDING: {gone}"


@pytest.mark.parametrize("line", [
    "# See DESIGN.md section 3a.", "# (DESIGN §5)", "# ---- issue 15 part 2 ----", "# the spec's order",
    "# (spec: builderSem)", '# spec "Executor Pool"', "# spec/worker.md says so", "# issue #22"])
def test_a_citation_is_found(tmp_path, line):
    p = tmp_path / "m.py"
    p.write_text(f"x = 1  {line}\n")
    assert [n for n, t in prose(p) if CITATION.search(t)] == [1]


@pytest.mark.parametrize("line", [
    "// Public gRPC contract of the BlockX Worker (DESIGN.md section 3).",
    "  // ---- status (issue 15 part 3) ----", "// ---- TaskSession (DESIGN.md section 3a) ----",
    "  // Many tasks on one stream (DESIGN.md section 3a): every request is answered"])
def test_a_citation_in_a_proto_comment_is_found(tmp_path, line):
    p = tmp_path / "m.proto"
    p.write_text(f"syntax = \"proto3\";\n{line}\nmessage M {{ string a = 1; }}\n")
    assert [n for n, t in prose(p) if CITATION.search(t)] == [2]


@pytest.mark.parametrize("code", [
    "spec = to_call(row)\n", "def f(spec: Any):\n    return spec.args\n", "for spec in specs:\n    pass\n",
    "s = importlib.util.find_spec(name)\n", "# a call spec of the builder\n", "# the subsection 3 of it\n"])
def test_code_and_ordinary_words_are_not_citations(tmp_path, code):
    p = tmp_path / "m.py"
    p.write_text(code)
    assert [t for _, t in prose(p) if CITATION.search(t)] == []
