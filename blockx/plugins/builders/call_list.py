"""callList: the general-purpose builder. The payload lists the calls explicitly:

    {"calls": [{"functionId": "add", "args": [1, 2]}, ...]}

Outputs come back in list order. Every entry is validated before any call is
produced, and an error names the offending index, so a bad list fails whole in the
Builder phase instead of running a prefix of it."""

from __future__ import annotations

from typing import Any, Sequence

from blockx._fast import load
from blockx.plugins.builder_api import (BuilderError, CallSpec, json_type, parse_payload,
                                        reject_unknown, require_function_id, require_object)

_pack = load("calllist").pack_call_list

NAME = "callList"
_ENTRY_KEYS = ("functionId", "args")


class CallListBuilder:
    name = NAME

    def build(self, payload: bytes, ctx: Any = None) -> Sequence[CallSpec]:
        data = require_object(NAME, parse_payload(NAME, payload))
        reject_unknown(NAME, data, ("calls",))
        calls = data.get("calls")
        if calls is None:
            raise BuilderError(f'{NAME}: "calls" is missing; expected '
                               '{"calls": [{"functionId": "add", "args": [1, 2]}, ...]}')
        if not isinstance(calls, list):
            raise BuilderError(f'{NAME}: "calls" must be an array, got {json_type(calls)}')
        # The calls come back packed (a sequence of CallSpec that the Calls phase
        # hands to the dispatcher as it is): see blockx/_fast/calllist_py.py.
        return _pack(calls if type(calls) is list else list(calls), _check_entry, CallSpec)


def _check_entry(i: int, entry: Any) -> tuple[str, list]:
    """Validate calls[i]: its function id and args list, or the BuilderError
    that names what is wrong with it."""
    if not isinstance(entry, dict):
        raise BuilderError(f"{NAME}: calls[{i}] must be an object "
                           f'{{"functionId": ..., "args": [...]}}, got {json_type(entry)}')
    if len(entry) != 2 or "functionId" not in entry or "args" not in entry:
        reject_unknown(f"{NAME}: calls[{i}]", entry, _ENTRY_KEYS)
    fid = require_function_id(NAME, entry.get("functionId"), f"calls[{i}].functionId")
    args = entry.get("args", None)
    if not isinstance(args, list):
        if args is None and "args" not in entry:
            raise BuilderError(f"{NAME}: calls[{i}].args is missing; expected an array "
                               "(use [] for no arguments)")
        raise BuilderError(f"{NAME}: calls[{i}].args must be an array, got {json_type(args)}")
    return fid, args
