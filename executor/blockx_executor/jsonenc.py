"""The JSON encodings the executor produces on behalf of user code.

Outputs and subcall arguments accept non-string dict keys (ints, floats, bools,
enums, dates become their JSON string form, as `json.dumps` does for ints) because
code over block data naturally returns `{block_number: ...}`. IO requests are also
key-sorted so that equal requests are equal bytes (the Worker's per-task IO cache
keys on the request bytes)."""

import orjson

OUTPUT_OPTIONS = orjson.OPT_NON_STR_KEYS
IO_REQUEST_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS


def dumps_output(value) -> bytes:
    """Encode a call output or subcall argument list; raises TypeError
    (orjson.JSONEncodeError) naming the offending type."""
    return orjson.dumps(value, option=OUTPUT_OPTIONS)


def dumps_io_request(value) -> bytes:
    return orjson.dumps(value, option=IO_REQUEST_OPTIONS)
