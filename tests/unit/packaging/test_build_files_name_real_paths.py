"""The build files (pyproject.toml, setup.py, the Makefile, MANIFEST.in, the
Containerfile) name only files that exist: a comment that sends a reader to a
test or a module that moved is a wrong map, caught here rather than by the
reader."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUILD_FILES = ("pyproject.toml", "setup.py", "Makefile", "MANIFEST.in", "Containerfile")
# a path of the repository: one of its top folders, then a file with a suffix the repo holds
PATH = re.compile(r"(?<![\w./-])((?:blockx|tests|docs|deploy|bench|executor|proto|examples)/[\w./*-]*\w\.(?:py|pyx|pxd|pyi|md|toml|ya?ml|sh|proto|conf|json))\b")


def named_paths(text: str) -> list[str]:
    return PATH.findall(text)


def test_every_path_a_build_file_names_exists():
    missing = []
    for name in BUILD_FILES:
        for path in named_paths((ROOT / name).read_text()):
            if not (list(ROOT.glob(path)) if "*" in path else (ROOT / path).exists()):
                missing.append(f"{name}: {path}")
    assert not missing, f"build files name paths that do not exist: {missing}"


def test_a_path_is_read_from_a_comment():
    assert named_paths("# kept equal by tests/unit/ops/test_x.py; see docs/a-b.md.") == \
        ["tests/unit/ops/test_x.py", "docs/a-b.md"]
    assert named_paths("include blockx/worker/v1/*_pb2.py") == ["blockx/worker/v1/*_pb2.py"]
