"""The grammar of `blockx submit --calls FN:ARGS`, and the parser that holds a
call to it before anything is sent.

    CALL  := FN | FN ":" ARGS
    FN    := a function id, by the rule `blockx functions push` and the etcd and
             Redis function sources apply (function_code.etcd.FUNCTION_ID_RE): a
             letter or digit, then letters, digits, "_", "." or "-", at most 128
             characters, not ending in ".py"
    ARGS  := nothing (no arguments) | VALUE ("," VALUE)* | one JSON array
    VALUE := one JSON value (a string in double quotes), spaces around it allowed

One JSON array is the argument list itself (`add:[1,2]` is `add:1,2`); to pass
one list as the only argument, nest it (`echo:[[1,2]]`). A call outside the
grammar is a usage error (exit 2) naming the 1-based column of the first
character that does not fit, with the call echoed and a caret under it: a
mistake is caught here, not sent to a worker as a function named `add 1 2` or an
argument that is a stray string."""

from __future__ import annotations

import json
import shlex
from typing import Any

from blockx.cli.exit import UsageError
from blockx.cli.text import term_safe

GRAMMAR_HELP = """\
a call of the task's callList, FN:ARGS (repeatable; the calls run in this order):
FN is a function id (a letter or digit, then letters, digits, _ . -; at most 128),
ARGS its arguments: JSON values separated by commas, or one JSON array of them;
FN alone (or FN:) has none. Strings are JSON: in double quotes. Examples: add:1,2
add:[1,2] 'echo:"hi",{"k":1}' echo:[[1,2]] (one list argument)"""

_WS = " \t\r\n"
_DECODER = json.JSONDecoder(parse_constant=lambda name: _not_json(name))


class _NotJSON(ValueError):
    pass


def _not_json(name: str):
    raise _NotJSON(name)


class CallSyntaxError(UsageError):
    """A --calls value outside the grammar: ``detail`` says where (column, the call
    echoed with a caret) without the flag's name, for argparse, which adds it."""

    def __init__(self, text: str, column: int, problem: str) -> None:
        self.text = text
        self.column = column
        self.problem = problem
        shown = term_safe(text)
        caret = len(term_safe(text[:column - 1]))
        self.detail = f"{term_safe(shlex.quote(text))}: column {column}: {problem}\n  {shown}\n  {' ' * caret}^"
        super().__init__(f"--calls {self.detail}")


def _check_function_id(text: str, fid: str) -> None:
    """The function id rule itself is function_code.etcd's; what is local is saying
    which character breaks it: the first whose prefix no longer matches."""
    from blockx.plugins.function_code.etcd import FUNCTION_ID_RE, valid_function_id

    if not fid:
        raise CallSyntaxError(text, 1, "expected a function id (FN or FN:ARGS, e.g. add:1,2)"
                              if not text else "the function id is missing before ':' (e.g. add:1,2)")
    if valid_function_id(fid):
        return
    bad = next((i for i in range(len(fid)) if not FUNCTION_ID_RE.match(fid[:i + 1])), None)
    if bad is None:
        raise CallSyntaxError(text, len(fid) - 2, f"a function id names no .py file: {fid[:-3]}")
    ch = fid[bad]
    if bad == 0:
        problem = "a function id starts with a letter or a digit"
    elif ch.isalnum() or ch in "_.-":
        problem = f"a function id is at most {bad} characters"
    elif ch in _WS:
        problem = "a function id has no spaces; its arguments follow a colon (FN:ARGS, e.g. add:1,2)"
    else:
        problem = (f"{term_safe(repr(ch))} cannot be in a function id (letters, digits, _ . -); "
                   "its arguments follow a colon (FN:ARGS)")
    raise CallSyntaxError(text, bad + 1, problem)


def _skip_ws(s: str, pos: int) -> int:
    while pos < len(s) and s[pos] in _WS:
        pos += 1
    return pos


def _bare_word(s: str, pos: int) -> str:
    end = pos
    while end < len(s) and s[end] not in _WS + ",[]{}:\"":
        end += 1
    return s[pos:end]


def _value(text: str, rest: str, base: int, pos: int) -> tuple[Any, int]:
    """One JSON value of ARGS at ``pos`` (``base``: where ARGS starts in ``text``)."""
    try:
        return _DECODER.raw_decode(rest, pos)
    except _NotJSON as exc:
        raise CallSyntaxError(text, base + pos + 1, f"{exc} is not JSON (JSON has no NaN or Infinity)") from None
    except json.JSONDecodeError as exc:
        word = _bare_word(rest, exc.pos)
        if word[:1].isalpha():
            problem = f"{term_safe(word)} is not a JSON value: a string is written in double quotes"
            if exc.pos == pos:
                problem += f", e.g. --calls '{text[:base - 1]}:\"{term_safe(word)}\"'"
        else:
            what = exc.msg.removesuffix(" starting at")       # "Unterminated string starting at" + its pos
            what = f"{what[0].lower()}{what[1:]} (JSON)"
            problem = f"the arguments end too soon: {what}" if exc.pos >= len(rest) else what
        raise CallSyntaxError(text, base + exc.pos + 1, problem) from None


def parse_args_text(text: str, rest: str, base: int) -> list:
    """ARGS (``rest``, which starts at 0-based ``base`` of ``text``) as the argument list."""
    pos = _skip_ws(rest, 0)
    if pos == len(rest):
        return []
    values: list = []
    array_form = rest[pos] == "["
    while True:
        if pos == len(rest) or rest[pos] == ",":
            where = "after the last ','" if pos == len(rest) else "between two commas"
            raise CallSyntaxError(text, base + pos + 1, f"a value is missing {where} (a JSON value, e.g. 1 or \"a\")")
        value, end = _value(text, rest, base, pos)
        values.append(value)
        pos = _skip_ws(rest, end)
        if pos == len(rest):
            break
        if rest[pos] != ",":
            raise CallSyntaxError(text, base + pos + 1, "expected ',' between two values, or the end of the call")
        pos = _skip_ws(rest, pos + 1)
    if array_form and len(values) == 1:
        return values[0]                 # one JSON array: the argument list itself
    return values


def parse_call(text: str) -> dict[str, Any]:
    """'add:1,2' -> {"functionId": "add", "args": [1, 2]}; CallSyntaxError (exit 2)
    naming the column of the first character outside the grammar."""
    colon = text.find(":")
    fid = text if colon < 0 else text[:colon]
    _check_function_id(text, fid)
    if colon < 0:
        return {"functionId": fid, "args": []}
    return {"functionId": fid, "args": parse_args_text(text, text[colon + 1:], colon + 1)}


def calls_arg(text: str) -> dict[str, Any]:
    """argparse ``type=`` of --calls: the call parsed while the command line is, so a
    malformed one ends the command (exit 2, argparse's usage error) before a
    connection is opened."""
    import argparse

    try:
        return parse_call(text)
    except CallSyntaxError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None
