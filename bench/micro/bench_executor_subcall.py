"""The executor's side of one subcall round trip, in-process over a socketpair
(make bench's (d) subcalls, without the Worker): 16 parent calls each loop on
sdk.call; per subcall the executor sends CallWaiting(subcall) as the parent
suspends, runs the child it gets in an ExecuteCall, sends its CallCompleted,
and resumes the parent on the ResumeCall, which calls again. This module plays
the Worker between the timed steps (answering waits with children and
completions with resumes); only the executor's own handling is timed.

Time per subcall; "compiled vs twin" is the codec under BLOCKX_NO_EXTENSIONS=1
(twin_env). The scheduler itself is Python, so the ratio is informational
(check=False): the figure to watch is the compiled side's time per subcall."""

from time import perf_counter

from bench.micro import register, sides
from bench.micro.bench_executor_scheduler import executor_in_process

REQUIRES = ("executor/blockx_executor/scheduler.py",)
PARENTS = 16
PARENT = ("import blockx_executor.sdk as sdk\n"
          "def main(n):\n"
          "    total = 0\n"
          "    for i in range(n):\n"
          "        total += sdk.call('child', i)\n"
          "    return total\n")
CHILD = "def main(i):\n    return i\n"


def setup():
    state = executor_in_process({"parent": PARENT, "child": CHILD})
    s, codec, m, digests = state["s"], state["codec"], state["m"], state["digests"]
    state.update(dec=codec.FrameDecoder(), waits=[], seq=[0])
    # The parents never return (unlimited budget, a loop of 10**12 subcalls): each
    # run answers some of their waits.
    starts = b"".join(codec.encode_frame(m.execute_call(f"p{j}", "t", "parent", digests["parent"], [10**12], 1))
                      for j in range(PARENTS))
    _executor_step(s, starts)
    _read(state)
    if len(state["waits"]) != PARENTS:
        raise AssertionError("the parents did not all wait on a subcall")
    return state


def _executor_step(s, chunk: bytes) -> float:
    t0 = perf_counter()
    s.handle_frames(s.decoder.feed(chunk))
    s.run_ready()
    s.conn.flush()
    return perf_counter() - t0


def _read(state) -> list:
    """The executor's frames: waits are kept for the next step, completions returned."""
    done = []
    while True:
        try:
            data = state["peer"].recv(1 << 20)
        except BlockingIOError:
            break
        for env, _ in state["dec"].feed(data):
            if env["messageType"] == "CallWaiting":
                state["waits"].append(env)
            elif env["messageType"] == "CallCompleted":
                done.append(env)
            else:
                raise AssertionError(f"unexpected {env['messageType']}: {env}")
    return done




def run(state, loops):
    s, codec, m, digests = state["s"], state["codec"], state["m"], state["digests"]
    elapsed = 0.0
    done = 0
    while done < loops:
        waits = state["waits"][:loops - done]
        del state["waits"][:len(waits)]
        parents = {}
        chunk = []
        for env in waits:
            state["seq"][0] += 1
            child_id = f"{env['callId']}/s{state['seq'][0]}"
            parents[child_id] = (env["callId"], env["requestId"])
            chunk.append(codec.encode_frame(m.execute_call(
                child_id, "t", "child", digests["child"], env["payload"]["args"], 1,
                parent_call_id=env["callId"])))
        elapsed += _executor_step(s, b"".join(chunk))
        completed = _read(state)
        if len(completed) != len(waits):
            raise AssertionError(f"{len(waits)} children sent, {len(completed)} completed")
        resumes = b"".join(codec.encode_frame(m.resume_call_result(
            *parents[env["callId"]], "subcall", env["payload"]["output"])) for env in completed)
        elapsed += _executor_step(s, resumes)
        _read(state)
        done += len(waits)
    return elapsed


register("executor subcall round trip (parent waits, child runs, parent resumes)", setup, *sides(run),
         twin_env=True, requires=REQUIRES, check=False)
