"""JSON-lines logging: shape, structured fields, robustness, rate limiting."""

from __future__ import annotations

import asyncio
import io
import logging
import re

import orjson
import pytest

from blockx.app.logs import JsonFormatter, RateLimiter, parse_level, setup_logging
from blockx.log_event import log_event
from blockx.worker.v1 import worker_pb2 as pb

TS = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.fixture
def logged():
    stream = io.StringIO()
    handler = setup_logging("debug", stream=stream)
    lines = lambda: [orjson.loads(line) for line in stream.getvalue().splitlines()]  # noqa: E731
    yield lines
    logging.getLogger().removeHandler(handler)


def test_plain_message_shape(logged):
    logging.getLogger("blockx.test").info("hello %s", "world")
    (line,) = logged()
    assert set(line) == {"ts", "level", "logger", "msg"}
    assert TS.match(line["ts"])
    assert (line["level"], line["logger"], line["msg"]) == ("info", "blockx.test", "hello world")


def test_extra_fields_are_top_level(logged):
    logging.getLogger("x").warning("slow", extra={"fields": {"taskId": "t1", "ms": 12, "ok": True}})
    (line,) = logged()
    assert line["level"] == "warning"
    assert (line["taskId"], line["ms"], line["ok"]) == ("t1", 12, True)


def test_log_event_task_finished_with_task_statistic(logged):
    stat = pb.TaskStatistic(accepted_at_ms=1000, finished_at_ms=1250, call_count=3, cache_hits=1)
    log_event(logging.getLogger("blockx.orchestrator"), "task_finished",
              taskId="t-9", state="SUCCEEDED", failureCode="", statistic=stat)
    (line,) = logged()
    assert line["event"] == line["msg"] == "task_finished"
    assert line["taskId"] == "t-9" and line["state"] == "SUCCEEDED"
    # Every field, zeros included, as JSON numbers (not MessageToDict's int64 strings).
    assert line["statistic"] == {
        "acceptedAtMs": 1000, "finishedAtMs": 1250, "builderMs": 0, "callsMs": 0, "pluginMs": 0,
        "callCount": 3, "callsFailed": 0, "callRetries": 0, "cacheHits": 1,
    }


def test_nested_protobuf_result(logged):
    result = pb.TaskResult(state=pb.TASK_STATE_FAILED, failure_code="TIMED_OUT",
                           outputs=[b'{"a":1}'],
                           plugin_results=[pb.PluginResult(plugin="log", ok=True)])
    log_event(logging.getLogger("x"), "e", result=result)
    (line,) = logged()
    r = line["result"]
    assert r["state"] == pb.TASK_STATE_FAILED and r["failureCode"] == "TIMED_OUT"
    assert r["outputs"] == ['{"a":1}']
    assert r["pluginResults"][0]["plugin"] == "log"
    assert "statistic" not in r  # unset sub-message


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr for you")


def test_unserialisable_fields_never_raise(logged):
    cyclic: dict = {}
    cyclic["self"] = cyclic
    log_event(logging.getLogger("x"), "weird",
              obj=object(), raw=b"\xffok", items={3, 1, 2}, huge=2 ** 80,
              bad=BadRepr(), cyc=cyclic, int_keys={1: "a"}, tuple_keys={(2, 3): "b"})
    (line,) = logged()
    assert line["event"] == "weird"
    assert line["obj"].startswith("<object object")
    assert line["raw"] == "\\xffok"
    assert line["items"] == [1, 2, 3]
    assert line["huge"] == str(2 ** 80)
    assert "unrepresentable" in line["bad"]
    assert isinstance(line["cyc"], str)
    assert line["int_keys"] == {"1": "a"}
    assert "(2, 3)" in line["tuple_keys"]  # not encodable as an object: its repr


def test_reserved_names_do_not_overwrite(logged):
    logging.getLogger("x").info("real", extra={"fields": {"msg": "fake", "level": "x", "ts": 1}})
    (line,) = logged()
    assert line["msg"] == "real" and line["level"] == "info" and TS.match(line["ts"])
    assert (line["field.msg"], line["field.level"], line["field.ts"]) == ("fake", "x", 1)


def test_exception_and_bad_format_args(logged):
    log = logging.getLogger("x")
    try:
        raise ValueError("kaput")
    except ValueError:
        log.exception("failed")
    (exc_line,) = logged()
    assert exc_line["level"] == "error" and "ValueError: kaput" in exc_line["exc"]
    # Formatted directly: pytest's own capture handler would raise on these args.
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "count %d", ("not a number",), None)
    bad = orjson.loads(JsonFormatter().format(record))
    assert bad["msg"] == "count %d ('not a number',)"


def test_level_filtering_and_static_fields():
    stream = io.StringIO()
    handler = setup_logging("warn", stream=stream, static_fields={"service": "blockx-worker"})
    try:
        log = logging.getLogger("x")
        log.info("hidden")
        log_event(log, "also_hidden")
        log.error("shown")
        (line,) = [orjson.loads(x) for x in stream.getvalue().splitlines()]
        assert line["msg"] == "shown" and line["service"] == "blockx-worker"
    finally:
        logging.getLogger().removeHandler(handler)


def test_setup_logging_is_idempotent():
    root = logging.getLogger()
    before = len(root.handlers)
    a = setup_logging("info", stream=io.StringIO())
    b = setup_logging("debug", stream=io.StringIO())
    try:
        assert a not in root.handlers and b in root.handlers
        assert len(root.handlers) == before + 1
        assert root.level == logging.DEBUG
    finally:
        root.removeHandler(b)


@pytest.mark.parametrize(("given", "want"), [
    ("info", logging.INFO), ("DEBUG", logging.DEBUG), ("warn", logging.WARNING),
    ("Warning", logging.WARNING), ("error", logging.ERROR), ("fatal", logging.CRITICAL), (10, 10),
])
def test_parse_level(given, want):
    assert parse_level(given) == want


@pytest.mark.parametrize("bad", ["verbose", "", True])
def test_parse_level_rejects(bad):
    with pytest.raises(ValueError, match="log level"):
        parse_level(bad)


def test_formatter_survives_a_broken_record():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.fields = "not a mapping"  # type: ignore[attr-defined]
    line = orjson.loads(JsonFormatter().format(record))
    assert line["msg"] == "m" and line["field.fields"] == "not a mapping"


def test_closed_stream_does_not_raise():
    stream = io.StringIO()
    handler = setup_logging("info", stream=stream)
    try:
        stream.close()
        logging.getLogger("x").info("into the void")
    finally:
        logging.getLogger().removeHandler(handler)


def test_rate_limiter_counts_suppressed():
    now = [0.0]
    rl = RateLimiter(5.0, clock=lambda: now[0])
    assert rl.check("etcd") == 0
    assert rl.check("etcd") is None
    now[0] = 4.9
    assert rl.check("etcd") is None
    assert rl.check("other") == 0  # keys are independent
    now[0] = 5.0
    assert rl.check("etcd") == 2
    assert rl.check("etcd") is None
    assert rl.reset("etcd") == 1
    assert rl.check("etcd") == 0


class CountingStream(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes = 0

    def write(self, text):
        self.writes += 1
        return super().write(text)


async def test_batched_handler_writes_a_loop_iteration_in_one_write_in_order():
    stream = CountingStream()
    handler = setup_logging("info", stream=stream, batched=True)
    log = logging.getLogger("blockx.test.batched")
    try:
        for i in range(100):
            log_event(log, "n", i=i)
        assert stream.getvalue() == "", "written before the loop iteration ended"
        await asyncio.sleep(0)
        assert stream.writes == 1
        lines = [orjson.loads(x) for x in stream.getvalue().splitlines()]
        assert [x["i"] for x in lines] == list(range(100))
        log_event(log, "n", i=100)
        handler.flush()                               # exit / shutdown: nothing pending is lost
        assert orjson.loads(stream.getvalue().splitlines()[-1])["i"] == 100
    finally:
        logging.getLogger().removeHandler(handler)


def test_batched_handler_writes_at_once_without_a_loop():
    stream = io.StringIO()
    handler = setup_logging("info", stream=stream, batched=True)
    try:
        log_event(logging.getLogger("blockx.test.batched"), "n", i=1)
        assert orjson.loads(stream.getvalue())["i"] == 1
    finally:
        logging.getLogger().removeHandler(handler)


def test_ts_is_the_records_utc_time_to_the_millisecond_across_seconds():
    # The second's text is reused while the seconds repeat: records that go
    # forward, back and across a second (and a day) still get their own time.
    fmt = JsonFormatter()
    cases = [(1_700_000_000.999, "2023-11-14T22:13:20.999Z"), (1_700_000_001.0, "2023-11-14T22:13:21.000Z"),
             (1_700_000_000.5, "2023-11-14T22:13:20.500Z"), (1_700_000_000.5, "2023-11-14T22:13:20.500Z"),
             (1_700_006_399.25, "2023-11-14T23:59:59.250Z"), (1_700_006_400.0, "2023-11-15T00:00:00.000Z"),
             (0.001, "1970-01-01T00:00:00.001Z")]
    for created, want in cases:
        rec = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
        rec.created = created
        assert orjson.loads(fmt.format(rec))["ts"] == want, created


class _Key(str):
    """A str subclass as a field name: kept as it is, like a plain str."""


@pytest.mark.parametrize("fields, want", [
    ({"a": 1, "b": "x"}, {"a": 1, "b": "x"}),
    ({"a": 1, "msg": "fake", "z": 2}, {"a": 1, "field.msg": "fake", "z": 2}),
    ({7: "seven", "a": 1}, {"7": "seven", "a": 1}),
    ({(1, 2): "t", "a": 1}, {"(1, 2)": "t", "a": 1}),
    ({_Key("level"): "k", "a": 1}, {"field.level": "k", "a": 1}),
])
def test_fields_become_the_same_keys_in_the_same_order(fields, want):
    # Plain-str fields take a shortcut; any other key goes the long way: same line either way.
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", (), None)
    record.fields = fields
    line = orjson.loads(JsonFormatter({"service": "s"}).format(record))
    assert list(line)[4:] == ["service", *want] and {k: line[k] for k in want} == want


def test_lean_records_leave_out_thread_and_process_but_keep_the_line():
    stream = io.StringIO()
    saved = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    seen = []
    handler = setup_logging("info", stream=stream, lean_records=True)
    catch = logging.Handler()
    catch.emit = seen.append
    logging.getLogger().addHandler(catch)
    try:
        log_event(logging.getLogger("x"), "task_finished", task_id="t1", calls_ms=2)
        (line,) = [orjson.loads(x) for x in stream.getvalue().splitlines()]
        assert (line["event"], line["task_id"], line["calls_ms"]) == ("task_finished", "t1", 2)
        (rec,) = seen
        assert (rec.thread, rec.threadName, rec.process, rec.processName) == (None, None, None, None)
        assert rec.lineno > 0                  # the source location is still collected (stack_info needs it)
    finally:
        logging.logThreads, logging.logProcesses, logging.logMultiprocessing = saved
        logging.getLogger().removeHandler(catch)
        logging.getLogger().removeHandler(handler)
