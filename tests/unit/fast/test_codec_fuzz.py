"""Fuzz the frame decoders with well over 100,000 mutated and random inputs.

Each hypothesis example is a seed; a seeded generator turns it into a batch of
byte strings (mutations of valid frame streams, hostile length prefixes, plain
noise) and split points. Every input goes through a fresh compiled decoder and,
as an oracle, the pure-Python twin with the same splits: each must either return
well-formed frames or raise a typed FrameError, and both must agree exactly.
derandomize=True keeps CI stable; a failure prints the seed that reproduces it."""

import random
import struct

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockx._fast import errors, implementations

IMPLS = dict(implementations("codec"))
TWIN = IMPLS["python"]
DUT = IMPLS.get("cython", TWIN)  # the compiled decoder, unless extensions are off
BATCH = 110
EXAMPLES = 1000  # x BATCH = 110,000 inputs

_u32 = struct.Struct(">I").pack
CORPUS_ITEMS = [
    ({"messageType": "HeartbeatAck", "callId": "", "requestId": ""}, None),
    ({"messageType": "ExecuteCall", "callId": "c1", "requestId": "",
      "payload": {"taskId": "t", "args": [1, 2.5, "x", None, True], "attemptSeq": 1}}, None),
    ({"messageType": "CallWaiting", "callId": "c1", "requestId": "r1",
      "payload": {"waitKind": "io", "request": {"k": "v"}}}, b"\x00\x01BXB1\xff"),
    ({"messageType": "ResumeCall", "callId": "c", "requestId": "r"}, b""),
    ({"messageType": "CallCompleted", "callId": "ü", "payload": {"output": {"a": [{}]}}},
     bytes(range(40))),
]
CORPUS = [TWIN.encode_frame(e, s) for e, s in CORPUS_ITEMS] + [
    # Frames written from the templates (the decoder reads these without orjson).
    TWIN.encode_execute_call("t/1", "t", "add", "sha256:" + "ab" * 32, "", b"[3,17]", "", 0, 1),
    TWIN.encode_call_completed("t/1", "t", 1, b'{"a":[1,"}",null,true,2.5]}', 0, 1764600000000, 3),
    TWIN.encode_resume_result("t/1", "7", "subcall", b'"x\\"y"', 2),
    TWIN.encode_call_waiting_subcall("t/1", "7", "t", 1, "add", b"[3,-17]", 0, b'["t/1"]'),
]
INTERESTING_U32 = [0, 1, 3, 4, 7, 8, 9, 12, 0x7B, 255, 256, 65535, 65536,
                   16 * 1024 * 1024 - 1, 16 * 1024 * 1024, 16 * 1024 * 1024 + 1,
                   0x7FFFFFFF, 0x80000000, 0xFFFFFFFF]
TOKENS = [b"BXB1", b"{", b"}", b"[", b"]", b'"messageType"', b":", b",", b"null", b"\xff",
          b"\x00", b'"', b"\\", b"BXB", b'{"messageType":"X"}', b"1e999", b"-"]


def mutate(rng: random.Random, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(9)
        pos = rng.randint(0, len(buf))
        if op == 0 and buf:  # flip a bit
            i = rng.randrange(len(buf))
            buf[i] ^= 1 << rng.randrange(8)
        elif op == 1 and buf:  # replace a byte
            buf[rng.randrange(len(buf))] = rng.randrange(256)
        elif op == 2:  # insert bytes
            buf[pos:pos] = rng.randbytes(rng.randint(1, 8))
        elif op == 3 and buf:  # delete a run
            del buf[pos:pos + rng.randint(1, 8)]
        elif op == 4:  # truncate
            del buf[pos:]
        elif op == 5 and len(buf) >= 4:  # rewrite a length field (prefix or JSON length)
            at = rng.choice([0, 8 if buf[4:8] == b"BXB1" else 0, rng.randrange(len(buf) - 3)])
            buf[at:at + 4] = _u32(rng.choice(INTERESTING_U32 + [rng.randrange(1 << 32)]))
        elif op == 6:  # splice a token
            buf[pos:pos] = rng.choice(TOKENS)
        elif op == 7:  # append another frame
            buf += rng.choice(CORPUS)
        elif op == 8 and len(buf) > 4:  # fix the prefix to the real length (deep mutations)
            buf[0:4] = _u32(len(buf) - 4)
    return bytes(buf)


def make_input(rng: random.Random) -> bytes:
    kind = rng.randrange(10)
    if kind < 6:
        base = b"".join(rng.choice(CORPUS) for _ in range(rng.randint(1, 3)))
        return mutate(rng, base)
    if kind == 6:  # a correct length prefix around random bytes
        body = rng.randbytes(rng.randint(0, 40))
        return _u32(len(body)) + body
    if kind == 7:  # BXB1 header with random JSON length and tokens
        body = b"BXB1" + _u32(rng.choice(INTERESTING_U32)) + b"".join(
            rng.choice(TOKENS) for _ in range(rng.randint(0, 5)))
        return _u32(len(body)) + body
    if kind == 8:  # hostile prefixes
        return _u32(rng.choice(INTERESTING_U32)) + rng.randbytes(rng.randint(0, 12))
    return rng.randbytes(rng.randint(0, 64))  # noise


def run(mod, data: bytes, cuts: list):
    """Feed data split at `cuts`; return ("ok", frames) or ("err", type, message, frames)."""
    dec = mod.FrameDecoder()
    got = []
    pos = 0
    try:
        for cut in cuts + [len(data)]:
            got += dec.feed(data[pos:cut])
            pos = cut
        dec.eof()
    except errors.FrameError as exc:
        # A failed decoder stays failed with the same error type.
        try:
            dec.feed(b"\x00\x00\x00\x02{}")
        except type(exc):
            pass
        else:
            raise AssertionError("decoder accepted input after failing")
        return ("err", type(exc), str(exc), got + exc.frames)
    return ("ok", got)


def typed(x):
    """A decoding outcome as nested tuples that tell apart key order, True from 1
    and 1.0 from 1 (== does not)."""
    if type(x) is dict:
        return ("dict", tuple((k, typed(v)) for k, v in x.items()))
    if type(x) in (list, tuple):
        return (type(x).__name__, tuple(typed(v) for v in x))
    return (type(x).__name__, x)


def check_frames(frames):
    for env, side in frames:
        assert type(env) is dict
        mt = env["messageType"]
        assert type(mt) is str and mt
        assert side is None or type(side) is bytes
        orjson.dumps(env)  # a JSON-serialisable tree


_inputs_run = []


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 64 - 1))
def _fuzz_batch(seed):
    rng = random.Random(seed)
    _inputs_run.append(BATCH)
    for _ in range(BATCH):
        data = make_input(rng)
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data) + 1, rng.randint(0, 3))))
        got = run(DUT, data, cuts)
        check_frames(got[-1])
        if got[0] == "err":
            assert issubclass(got[1], errors.FrameError) and got[1] is not errors.FrameError
        if DUT is not TWIN:
            assert typed(run(TWIN, data, cuts)) == typed(got), (data, cuts)


def test_fuzz_decoder_yields_only_frames_or_typed_errors():
    _inputs_run.clear()
    _fuzz_batch()
    assert sum(_inputs_run) >= 100_000


def test_fuzz_corpus_is_valid_and_mutations_hit_every_error_type():
    """Guards the fuzzer itself: unmutated corpus decodes; mutations reach each error."""
    for data in CORPUS:
        assert run(DUT, data, []) [0] == "ok"
    rng = random.Random(7)
    seen = set()
    for _ in range(20000):
        got = run(DUT, make_input(rng), [])
        if got[0] == "err":
            seen.add(got[1])
    assert seen >= {errors.FrameTooLarge, errors.BadMagic, errors.JsonLengthOutOfRange,
                    errors.InvalidJson, errors.NotAnObject, errors.MissingMessageType,
                    errors.TruncatedFrame}, seen
