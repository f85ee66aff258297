"""Every relative link of README.md and docs/*.md reaches a file of the repository
and, with a #fragment, a heading of that page (the anchor GitHub makes of it), so
moving a section or renaming a heading cannot leave a link dangling."""
from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: pathlib.Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.+)$", text, re.M)}


def links(page: pathlib.Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", page.read_text()))
            if not m.group(1).startswith(("http://", "https://", "mailto:"))]


def test_every_relative_link_reaches_a_file_and_a_heading():
    broken = []
    for page in PAGES:
        for target in links(page):
            path, _, frag = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif frag and dest.suffix == ".md" and frag not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading in {dest.relative_to(ROOT)})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_anchors_are_made_as_github_makes_them():
    assert anchor("Tracing (OpenTelemetry)") == "tracing-opentelemetry"
    assert anchor("A task as JSON: `blockx submit --task-json`") == "a-task-as-json-blockx-submit---task-json"
    assert anchor("Dependencies: packages the Worker does not have") == "dependencies-packages-the-worker-does-not-have"
