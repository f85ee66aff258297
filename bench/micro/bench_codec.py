"""UDS frame codec: encode_frame and FrameDecoder.feed for a small ExecuteCall
envelope and for envelopes with 64 KiB and 4 MiB binary sidecars (the BXB1
path of IO response bodies), plus decoding a chunk of 64 small frames at once
(how data_received sees a busy connection)."""

from time import perf_counter

from bench.micro import fast_pair, fast_requires, register

REQUIRES = fast_requires("codec") + ("blockx/_fast/errors.py",)


def _envelope():
    return {
        "messageType": "ExecuteCall",
        "callId": "task-7f3a9c/call-000042",
        "requestId": "",
        "payload": {
            "taskId": "task-7f3a9c", "functionId": "transfer_summary",
            "functionCodeDigest": "3f0a5c1e9b7d2a4c6e8f01234567890abcdef0123456789abcdef0123456789a",
            "entrySelector": "main", "args": ["0xabc123", 17, {"limit": 100}],
            "parentCallId": "", "callBudgetMs": 30000, "attemptSeq": 1,
        },
    }


SIDECARS = {"small envelope": None, "64 KiB sidecar": 64 * 1024, "4 MiB sidecar": 4 * 1024 * 1024}


def _setup(size):
    def setup():
        cy, py = fast_pair("codec")
        env = _envelope()
        sidecar = None if size is None else bytes(range(256)) * (size // 256)
        frame = cy.encode_frame(env, sidecar)
        assert frame == py.encode_frame(env, sidecar)
        return {"cython": cy, "python": py, "env": env, "sidecar": sidecar, "frame": frame}
    return setup


def _encode(label):
    def run(state, loops):
        encode = state[label].encode_frame
        env, sidecar = state["env"], state["sidecar"]
        t0 = perf_counter()
        for _ in range(loops):
            encode(env, sidecar)
        return perf_counter() - t0
    return run


def _decode(label):
    def run(state, loops):
        feed = state[label].FrameDecoder().feed
        frame = state["frame"]
        t0 = perf_counter()
        for _ in range(loops):
            feed(frame)
        return perf_counter() - t0
    return run


def _setup_chunk():
    cy, py = fast_pair("codec")
    env = _envelope()
    chunk = cy.encode_frames([(env, None)] * 64)
    return {"cython": cy, "python": py, "frame": chunk}


for _name, _size in SIDECARS.items():
    register(f"codec encode {_name}", _setup(_size), _encode("cython"), _encode("python"),
             requires=REQUIRES)
    register(f"codec decode {_name}", _setup(_size), _decode("cython"), _decode("python"),
             requires=REQUIRES)
register("codec decode chunk of 64 small frames", _setup_chunk, _decode("cython"),
         _decode("python"), requires=REQUIRES)
