"""docs/configuration.md's table lists every setting the configuration declares
(blockx/app/config*.py): its WORKER_CONFIG key, its environment variable and its
default, with what each profile changes. The declarations are the one source of
those three columns; the meaning column is the page's own (a new setting starts
with its declared `doc`). Change a setting, and the page follows with

    .venv/bin/python tests/unit/app/test_config_table.py --write

which rewrites the table between its two marker lines in place, keeping each
row's meaning."""
from __future__ import annotations

import json
import pathlib
import re
import sys

from blockx.app.config import WorkerFullConfig, load_config
from blockx.app.config_fields import env_name, iter_leaves
from blockx.app.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[3]
PAGE = ROOT / "docs" / "configuration.md"
BEGIN = "<!-- the settings table: tests/unit/app/test_config_table.py --write -->"
END = "<!-- end of the settings table -->"
HEADER = "| key (`WORKER_CONFIG`) | environment variable | default | meaning |\n|---|---|---|---|\n"
MiB = 1024 * 1024
# Defaults computed from the environment the Worker starts in, said in words.
DERIVED = {
    "socketPath": "`$XDG_RUNTIME_DIR` or `/tmp`, then `blockx-<uid>/worker-<pid>.sock`",
    "dataPlane.stateDir": "`$XDG_STATE_HOME/blockx`, else `~/.local/state/blockx`",
}


def value(v) -> str:
    if isinstance(v, str) and v.startswith(str(ROOT) + "/"):
        return f"the package's `{v[len(str(ROOT)) + 1:]}`"        # a path inside the installed package
    text = f"`{json.dumps(v)}`"
    if isinstance(v, int) and not isinstance(v, bool) and v >= MiB and v % MiB == 0:
        text += f" ({v // MiB} MiB)"
    return text


def settings() -> list[tuple[str, str, str, str]]:
    """(key, env, default, declared doc) of every leaf setting, in declaration order."""
    base = WorkerFullConfig()
    tuned = {name: {p: getattr(o, f.name) for p, o, f, _t in iter_leaves(load_config(profile, env={}))}
             for name, profile in PROFILES.items()}
    out = []
    for path, owner, f, _t in iter_leaves(base):
        env = env_name(path, f)
        if path in DERIVED:
            default = DERIVED[path]
        else:
            v = getattr(owner, f.name)
            default = value(v)
            changed = [f"{name}: {value(t[path])}" for name, t in tuned.items() if t[path] != v]
            if changed:
                default += f" ({'; '.join(changed)})"
        out.append((path, f"`{env}`" if env else "", default, f.metadata.get("doc", "")))
    return out


def rows_of(block: str) -> dict[str, tuple[str, str, str]]:
    """key -> (env, default, meaning) of the table's rows."""
    out = {}
    for line in block.splitlines()[2:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) == 4:
            out[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return out


def page_block(text: str) -> tuple[int, int]:
    start = text.index(BEGIN) + len(BEGIN) + 1
    return start, text.index(END, start)


def escape(cell: str) -> str:
    return cell.replace("|", "\\|")


def table(meanings: dict[str, str]) -> str:
    lines = [HEADER]
    for key, env, default, doc in settings():
        meaning = meanings.get(key) or escape(doc)
        lines.append(f"| `{key}` | {env} | {escape(default)} | {meaning} |\n")
    return "".join(lines)


def test_the_table_lists_every_setting_with_its_env_and_default():
    text = PAGE.read_text()
    start, end = page_block(text)
    got = rows_of(text[start:end])
    want = {key: (env, escape(default)) for key, env, default, _doc in settings()}
    missing, gone = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    wrong = [f"{k}: the page says {got[k][:2]}, the declaration {want[k]}" for k in want
             if k in got and got[k][:2] != want[k]]
    assert not (missing or gone or wrong), (
        f"docs/configuration.md's table differs from blockx/app/config*.py (missing: {missing}, gone: {gone}, "
        f"wrong: {wrong}); rewrite it with: .venv/bin/python tests/unit/app/test_config_table.py --write")


def test_every_setting_says_what_it_means():
    text = PAGE.read_text()
    start, end = page_block(text)
    empty = [k for k, (_env, _default, meaning) in rows_of(text[start:end]).items() if not meaning]
    assert not empty, f"write what these settings mean in docs/configuration.md: {empty}"


def test_the_rows_are_read_back_as_written():
    block = HEADER + "| `a.b` | `A_B` | `1` (dev: `2`) | x \\| y |\n| `c` |  | `\"\"` | z |\n"
    assert rows_of(block) == {"a.b": ("`A_B`", "`1` (dev: `2`)", "x \\| y"), "c": ("", '`""`', "z")}
    assert value(16 * MiB) == "`16777216` (16 MiB)" and value(True) == "`true`" and value([]) == "`[]`"


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: tests/unit/app/test_config_table.py --write")
    text = PAGE.read_text()
    start, end = page_block(text)
    meanings = {k: m for k, (_e, _d, m) in rows_of(text[start:end]).items()}
    PAGE.write_text(text[:start] + table(meanings) + text[end:])
