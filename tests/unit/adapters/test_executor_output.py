"""ExecutorOutput over real pipes on a real event loop: each line a tagged record
with the text escaped by the JSON encoder, long lines cut, a rate bound."""
import asyncio
import io
import json
import logging
import os

import pytest

from blockx.adapters.executor.output import ExecutorOutput
from blockx.app.logs import JsonFormatter


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def logged():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.executor.output")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False

    def records():
        return [json.loads(line) for line in stream.getvalue().splitlines()]
    return log, records, stream


async def pump(out, name, chunks, executor_id="exec-0"):
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    out.watch(loop, executor_id, name, r)
    os.close(r)
    for chunk in chunks:
        os.write(w, chunk)
        await asyncio.sleep(0.01)
    os.close(w)
    for _ in range(200):
        if not out._streams:
            break
        await asyncio.sleep(0.01)
    assert not out._streams, "the stream was not finished at EOF"


async def test_lines_become_escaped_fields_of_tagged_records(logged):
    log, records, stream = logged
    out = ExecutorOutput(logger=log)
    forged = '{"event": "worker_ready", "level": "info"}'
    await pump(out, "stdout", [forged.encode() + b"\n", b"half ", b"a line\nno newline at EOF\x1b[31m\xff"])
    recs = records()
    assert [r["text"] for r in recs] == [forged, "half a line", "no newline at EOF\x1b[31m\\xff"]
    assert all(r["event"] == "executor_output" and r["executor"] == "exec-0" and r["stream"] == "stdout"
               and r["truncated"] is False for r in recs)
    raw = stream.getvalue()
    assert "\\u001b" in raw and '\\"event\\": \\"worker_ready\\"' in raw
    assert len(raw.splitlines()) == 3                       # one physical line per record


async def test_a_long_line_is_cut_and_its_rest_skipped(logged):
    log, records, _ = logged
    out = ExecutorOutput(logger=log, line_bytes=10, bytes_per_s=1_000_000)
    await pump(out, "stderr", [b"0123456789ABCDEF", b"GHIJ\nnext\n"])
    recs = records()
    assert [(r["text"], r["truncated"]) for r in recs] == [("0123456789", True), ("next", False)]
    assert recs[0]["stream"] == "stderr"


async def test_a_flood_is_dropped_counted_and_reported(logged):
    log, records, _ = logged
    clock = Clock()
    out = ExecutorOutput(logger=log, line_bytes=100, bytes_per_s=1000, clock=clock)
    lines = b"".join(b"line %d\n" % i for i in range(1000))
    await pump(out, "stdout", [lines])
    kept = [r for r in records() if r["event"] == "executor_output"]
    dropped = [r for r in records() if r["event"] == "executor_output_dropped"]
    # a bucket of 1000 bytes, 128 + len(text) each, and the clock stood still
    assert len(kept) == 7 and out.dropped_lines_total == 993
    assert sum(r["lines"] for r in dropped) == 993 and dropped[0]["bytes_per_s"] == 1000
    # time refills the bucket
    clock.t += 1.0
    await pump(out, "stdout", [b"after a second\n"])
    assert records()[-1]["text"] == "after a second"


async def test_both_streams_of_an_executor_share_one_budget(logged):
    log, records, _ = logged
    out = ExecutorOutput(logger=log, bytes_per_s=300, clock=Clock())
    await pump(out, "stdout", [b"a" * 100 + b"\n"])
    await pump(out, "stderr", [b"b" * 100 + b"\n"])
    await pump(out, "stderr", [b"c\n"], executor_id="exec-1")
    kept = [(r["executor"], r["text"][:1]) for r in records() if r["event"] == "executor_output"]
    assert kept == [("exec-0", "a"), ("exec-1", "c")]


def test_bounds_must_be_positive():
    with pytest.raises(ValueError):
        ExecutorOutput(line_bytes=0)
    with pytest.raises(ValueError):
        ExecutorOutput(bytes_per_s=-1)


async def test_drops_are_reported_within_the_interval_even_when_the_output_stops(logged):
    log, records, _ = logged
    out = ExecutorOutput(logger=log, bytes_per_s=200)          # a real clock
    loop = asyncio.get_running_loop()
    r, w = os.pipe()
    out.watch(loop, "exec-0", "stdout", r)
    os.close(r)
    os.write(w, b"x" * 100 + b"\n" + b"y\n" * 50)
    for _ in range(300):                                    # the pipe stays open: no EOF
        if any(rec["event"] == "executor_output_dropped" for rec in records()):
            break
        await asyncio.sleep(0.01)
    dropped = [rec for rec in records() if rec["event"] == "executor_output_dropped"]
    assert dropped and dropped[0]["lines"] == 50
    os.close(w)
    out.close()
