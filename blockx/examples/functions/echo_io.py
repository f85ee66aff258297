"""echo_io(value, text="hello") -> what the devstub IO backend answered:

- a JSON round trip ({"op": "echo"} returns the request itself),
- a binary round trip ({"op": "upper"} upper-cases the body, carried as a sidecar),
- a repeated request, served from the task's IO cache (same "count" both times).

    blockx submit --calls 'echo_io:{"k":1}'"""

from blockx_executor import sdk


def main(value=None, text="hello"):
    echoed = sdk.io("devstub", {"op": "echo", "value": value})
    meta, body = sdk.io_bytes("devstub", {"op": "upper"}, body=str(text).encode())
    first = sdk.io("devstub", {"op": "count"})
    again = sdk.io("devstub", {"op": "count"})
    return {
        "echo": echoed["value"],
        "upper": body.decode() if body is not None else None,
        "bytes": meta["bytes"],
        "cached": first == again,
    }
