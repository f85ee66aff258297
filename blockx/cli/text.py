"""Text from a Worker, etcd or a task, made safe to print on a terminal.

What the CLI prints for a person (tables, headers, summary and error lines)
holds strings that others chose: task ids, executor ids, failure messages,
worker addresses and function ids read from etcd. A terminal obeys the control
characters in them: ESC starts a sequence that moves the cursor, clears the
screen, retitles the window or hides text, and a carriage return overwrites
the line. `term_safe` shows each such character as a visible escape instead
(ESC prints as the four characters ``\\x1b``), so what is printed is exactly
what was sent and nothing more. Escaped: the C0 controls (newline and tab too,
unless ``keep_newlines``), DEL, the C1 controls (0x9b is a one-byte CSI on
some terminals) and the Unicode bidirectional overrides and isolates, which
reorder how the rest of a line reads.

`rich_safe` also escapes rich's ``[style]`` markup, for strings given to rich as
markup (table cells, progress descriptions). JSON output needs neither:
json.dumps writes every control character as a ``\\uXXXX`` escape."""

from __future__ import annotations

_BIDI = tuple(range(0x202A, 0x202F)) + tuple(range(0x2066, 0x206A))
_TABLE = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))}
_TABLE.update({c: f"\\u{c:04x}" for c in _BIDI})
_TABLE_KEEP_NEWLINES = {c: v for c, v in _TABLE.items() if c != 0x0A}


def term_safe(value: object, *, keep_newlines: bool = False) -> str:
    """``str(value)`` with every terminal control character written as an escape."""
    text = value if type(value) is str else str(value)
    return text.translate(_TABLE_KEEP_NEWLINES if keep_newlines else _TABLE)


def rich_safe(value: object) -> str:
    """`term_safe`, with rich markup escaped too: for strings rich parses as markup."""
    from rich.markup import escape

    return escape(term_safe(value))
