"""Trace buffers: the two per-call hooks (ExecuteCall sent + CallCompleted) of a
task past its event cap (its calls sampled: the steady state of a big task), and
below it (every call's two events appended)."""

from time import perf_counter

from bench.micro import fast_pair, fast_requires, register

N_IDS = 4096


def setup():
    from blockx.core.dispatch.commands import DispatchCallCmd

    cy, py = fast_pair("tracebuf")
    cmds = [DispatchCallCmd(f"t/{i}", "exec-0", "t", "f", "d", "main", b"[]", 0, 1, "") for i in range(N_IDS)]
    ids = [f"t/{i}" for i in range(N_IDS)]      # separate strings, as decoded from a frame
    payload = {"taskId": "t", "attemptSeq": 1, "budgetUsedMs": 0}
    state = {}
    for label, mod in (("cython", cy), ("python", py)):
        tasks = {}
        rec = mod.CallRecorder(tasks)
        sampled = tasks["t"] = mod.TraceBuffer("t", 1000)
        for c, cid in zip(cmds, ids):          # past the cap: sampled
            rec.call_sent(c)
            rec.call_done(payload, cid, "exec-0", "")
        state[label] = (mod, rec, tasks)
    return state, cmds, ids, payload


def _pair(label, sampled):
    def run(state, loops):
        st, cmds, ids, payload = state
        mod, rec, tasks = st[label]
        if not sampled:
            tasks["t"] = mod.TraceBuffer("t", 1 << 40)    # never reaches its cap
        sent, done = rec.call_sent, rec.call_done
        n = len(cmds)
        t0 = perf_counter()
        for i in range(loops):
            j = i % n
            sent(cmds[j])
            done(payload, ids[j], "exec-0", "")
        return perf_counter() - t0
    return run


register("tracebuf call sent+done, sampled", setup, _pair("cython", True), _pair("python", True),
         requires=fast_requires("tracebuf"))
register("tracebuf call sent+done, recorded", setup, _pair("cython", False), _pair("python", False),
         requires=fast_requires("tracebuf"))
