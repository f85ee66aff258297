"""The frame schema is written once, in blockx.protocol.messages (the required and
optional keys of each message, with their types and defaults). The other two
writers of frames are held to it: the envelope constructors of messages, and the
codec's frame templates (compiled and twin), which write the per-call frames
byte by byte without building the dicts. Each writes exactly the keys the schema
names, and a template's frame decodes to the constructor's envelope for the same
values, so neither can gain, lose or rename a key alone. (The fast acceptance
of frames, blockx/_fast/framecheck, is held to the same schema's validation in
tests/unit/fast/test_framecheck.py.)"""
import copy

import orjson
import pytest

from blockx._fast import implementations
from blockx.protocol import messages as m

DIGEST = "sha256:" + "ab" * 32
CODECS = implementations("codec")

CONSTRUCTED = [
    (m.execute_call("t/1", "t", "add", DIGEST, [3, 17], 1, "main", "t/0", 50), ""),
    (m.resume_call_result("t/1", "7", m.WAIT_SUBCALL, {"x": 1}, 2), "result"),
    (m.resume_call_error("t/1", "7", m.WAIT_IO, "IO_ERROR", "down", True), "error"),
    (m.cancel_call("t/1", 1, "task ended"), ""),
    (m.call_waiting_io("t/1", "7", "t", 1, "devstub", {"k": 1}), m.WAIT_IO),
    (m.call_waiting_subcall("t/1", "7", "t", 1, "add", [1, 2], 30, ["t/1"]), m.WAIT_SUBCALL),
    (m.call_waiting_function_code("t/1", "7", "t", 1, "add", DIGEST), m.WAIT_FUNCTION_CODE),
    (m.call_completed("t/1", "t", 1, {"a": 1}, 3, 1764600000000, 2), ""),
    (m.call_failed("t/1", "t", 1, m.USER_ERROR, False, "boom"), ""),
    (m.heartbeat("exec-0", 42, 1, 0, 0, 128, 1 << 20, 1764600000000), ""),
]


@pytest.mark.parametrize("env,kind", CONSTRUCTED, ids=lambda v: v["messageType"] if isinstance(v, dict) else v)
def test_each_constructor_writes_the_keys_the_schema_names(env, kind):
    mt = env["messageType"]
    assert set(env) == {"messageType", "callId", "requestId", "payload"}
    assert set(env["payload"]) == m.schema_keys(mt, kind), mt
    # ... and the schema's validation takes it as written: nothing to fill in.
    checked = copy.deepcopy(env)
    m.validate(checked)
    assert checked == env


def _decoded(mod, frame: bytes) -> dict:
    (env, side), = mod.FrameDecoder().feed(frame)
    assert side is None
    return env


@pytest.mark.parametrize("label,codec", CODECS)
def test_each_frame_template_writes_the_constructors_envelope(label, codec):
    pairs = [
        (codec.encode_execute_call("t/1", "t", "add", DIGEST, "main", b"[3,17]", "t/0", 50, 1),
         m.execute_call("t/1", "t", "add", DIGEST, [3, 17], 1, "main", "t/0", 50), ""),
        (codec.encode_call_completed("t/1", "t", 1, b'{"a":[1,2.5]}', 3, 1764600000000, 2),
         m.call_completed("t/1", "t", 1, {"a": [1, 2.5]}, 3, 1764600000000, 2), ""),
        (codec.encode_resume_result("t/1", "7", m.WAIT_SUBCALL, b"42", 2),
         m.resume_call_result("t/1", "7", m.WAIT_SUBCALL, 42, 2), "result"),
        (codec.encode_call_waiting_subcall("t/1", "7", "t", 1, "add", b"[1,2]", 30, b'["t/1"]'),
         m.call_waiting_subcall("t/1", "7", "t", 1, "add", [1, 2], 30, ["t/1"]), m.WAIT_SUBCALL),
    ]
    for frame, want, kind in pairs:
        got = _decoded(codec, frame)
        assert got == want and list(got) == list(want), (label, want["messageType"])
        assert list(got["payload"]) == list(want["payload"]), (label, want["messageType"])
        assert set(got["payload"]) == m.schema_keys(got["messageType"], kind)
        # The general path encodes the constructor's envelope to the same bytes.
        assert codec.encode_frame(want) == frame, (label, want["messageType"])


def test_schema_keys_follow_the_tables():
    assert m.schema_keys(m.CANCEL_CALL) == {"attemptSeq", "reason"}
    assert m.schema_keys(m.CALL_WAITING, m.WAIT_IO) == {"taskId", "attemptSeq", "waitKind", "backend", "request"}
    assert "result" in m.schema_keys(m.RESUME_CALL, "result")
    assert orjson.loads(orjson.dumps(m.heartbeat_ack()))["messageType"] == m.HEARTBEAT_ACK
