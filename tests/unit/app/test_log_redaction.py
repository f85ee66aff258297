"""No JSON log line carries a secret blockx.redaction recognises, wherever in the
line it came from: the message, a structured field, an exception's text."""
import io
import json
import logging

from blockx.app.logs import JsonFormatter
from blockx.log_event import log_event


def lines_of(emit) -> list[dict]:
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(JsonFormatter())
    log = logging.getLogger("test.redaction")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    emit(log)
    return [json.loads(x) for x in buf.getvalue().splitlines()]


def test_urls_in_messages_fields_and_exceptions_are_redacted():
    def emit(log):
        log_event(log, "data_source_opened", source="chain", url="postgresql://u:pw-field-1@db/x?sslpassword=pw-2")
        log.warning("redis %s down", "redis://:pw-msg-3@127.0.0.1:6379/0")
        try:
            raise ConnectionError("https://rpc.example/?apikey=pw-exc-4 refused; Authorization: Bearer pw-bearer-5xyz")
        except ConnectionError:
            log.exception("rpc_failed")
    out = lines_of(emit)
    text = json.dumps(out)
    for secret in ("pw-field-1", "pw-2", "pw-msg-3", "pw-exc-4", "pw-bearer-5xyz"):
        assert secret not in text, secret
    assert out[0]["url"] == "postgresql://u:***@db/x?sslpassword=***" and out[0]["source"] == "chain"
    assert out[1]["msg"] == "redis redis://:***@127.0.0.1:6379/0 down"
    assert "https://rpc.example/?apikey=***" in out[2]["exc"]


def test_a_line_without_a_secret_is_unchanged():
    out = lines_of(lambda log: log_event(log, "task_finished", taskId="t-1", addr="http://127.0.0.1:8545/"))
    assert out[0]["taskId"] == "t-1" and out[0]["addr"] == "http://127.0.0.1:8545/"
