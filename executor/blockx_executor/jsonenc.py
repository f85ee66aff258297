"""The JSON encodings the executor produces on behalf of user code.

Outputs and subcall arguments accept non-string dict keys (ints, floats, bools,
enums, dates become their JSON string form, as `json.dumps` does for ints) because
code over block data naturally returns `{block_number: ...}`. IO requests are also
key-sorted so that equal requests are equal bytes (the Worker's per-task IO cache
keys on the request bytes)."""

import orjson

# A call output or subcall argument list: orjson.dumps(value, option=OUTPUT_OPTIONS),
# written inline where it runs once per call (Call.run, sdk.call); it raises TypeError
# (orjson.JSONEncodeError) naming the offending type.
OUTPUT_OPTIONS = orjson.OPT_NON_STR_KEYS
IO_REQUEST_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SORT_KEYS


def dumps_io_request(value) -> bytes:
    return orjson.dumps(value, option=IO_REQUEST_OPTIONS)
