"""EXECUTOR_SPAWN_MODE=sandbox with a real bubblewrap and with a real
runc container (EXECUTOR_SANDBOX_RUNTIME=oci): user functions try to break out;
each attempt is refused or contained, the call fails with a clear message, and
the Worker keeps serving. Every attack runs against both runtimes. The same
attacks in process mode show what the sandbox takes away (they succeed there)."""
import os
import pathlib
import signal
import socket
import tempfile
import threading
import time

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.e2e.conftest import make_functions_dir
from tests.support.worker import WorkerProcess, outputs

LIMITS = {"EXECUTOR_MEMORY_LIMIT_MB": "256", "EXECUTOR_MAX_PROCESSES": "32", "EXECUTOR_MAX_OPEN_FILES": "256"}
SECRET = "db-password-" + os.urandom(8).hex()      # in the Worker's environment only
CPU_MILLICORES = 250                               # the oci runtime's CPU limit here


def _worker(tmp_path_factory, mode, runtime="bwrap"):
    fdir = make_functions_dir(tmp_path_factory.mktemp(f"fn-{mode}-{runtime}"))
    extra = {"EXECUTOR_SANDBOX_RUNTIME": runtime}
    if runtime == "oci":
        extra["EXECUTOR_CPU_MILLICORES"] = str(CPU_MILLICORES)
    w = WorkerProcess({"EXECUTOR_SPAWN_MODE": mode, "RESULT_RETENTION_MS": "60000", "BLOCKX_TEST_DB_PASSWORD": SECRET,
                       **LIMITS, **extra}, functions_dir=fdir, executors=1)
    w.runtime = runtime
    try:
        w.start()
    except BaseException:
        w.stop()                                      # a Worker that never became ready
        raise
    if mode == "sandbox":
        ev = w.find_event("executor_sandbox")
        if ev is None or ev.get("runtime") != runtime:
            w.stop()
            raise AssertionError(f"the Worker did not run the {runtime} sandbox: {ev}")
    return w


@pytest.fixture(scope="module", params=("bwrap", "oci"))
def sandboxed(request, tmp_path_factory):
    w = _worker(tmp_path_factory, "sandbox", request.param)
    yield w
    w.stop()


@pytest.fixture(scope="module")
def unsandboxed(tmp_path_factory):
    w = _worker(tmp_path_factory, "process")
    yield w
    w.stop()


_ids = iter(range(1_000_000))


def run(w, fn, *args):
    task_id = f"t-{fn}-{next(_ids)}"
    w.submit_calls(task_id, [(fn, list(args))], retry=(1, 5, 0))
    return w.wait_terminal(task_id, timeout=30)


def failed_with(res, *fragments):
    assert res.state == pb.TASK_STATE_FAILED and res.failure_code == "CALL_FAILED", res
    for f in fragments:
        assert f in res.failure_message, res.failure_message
    return res.failure_message


def still_serving(w):
    res = run(w, "add", 20, 22)
    assert res.state == pb.TASK_STATE_SUCCEEDED and outputs(res) == [42], res


class Listener:
    """A loopback TCP port of the host that records every connection."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self):
        self.sock.close()


def test_the_sandbox_is_what_the_worker_reports(sandboxed):
    ev = sandboxed.find_event("executor_sandbox")
    assert ev is not None and "no network" in ev["sandbox"], ev
    assert ev["runtime"] == sandboxed.runtime, ev
    assert sandboxed.find_event("worker_serving")["spawn_mode"] == "sandbox"
    seen = outputs(run(sandboxed, "whereami"))[0]
    assert seen["uid"] == 65534 and seen["hostname"] == "blockx-executor"
    assert seen["cwd"] == "/tmp" and seen["home"] == "/tmp"
    assert seen["pid"] < 10, "the executor must run in a PID namespace of its own"
    assert "WORKER_LISTEN" not in seen["env"] and "EXECUTOR_SPAWN_MODE" not in seen["env"]


def test_no_tcp_connection_to_the_host(sandboxed, unsandboxed):
    listener = Listener()
    try:
        assert outputs(run(unsandboxed, "attack_tcp", listener.port)) == ["connected"]
        assert listener.accepted == 1
        failed_with(run(sandboxed, "attack_tcp", listener.port), "USER_ERROR", "ConnectionRefusedError")
        assert listener.accepted == 1, "a sandboxed executor reached the host's loopback"
    finally:
        listener.close()
    still_serving(sandboxed)


def test_no_name_resolution(sandboxed):
    msg = failed_with(run(sandboxed, "attack_dns", "example.com"), "USER_ERROR", "gaierror")
    assert "Temporary failure in name resolution" in msg or "Name or service not known" in msg, msg
    failed_with(run(sandboxed, "attack_dns", "localhost"), "gaierror")


def test_no_secret_file_beside_the_worker(sandboxed, unsandboxed):
    for w in (sandboxed, unsandboxed):
        pathlib.Path(w.tmp, "secret.txt").write_text("s3cret")
    if os.geteuid() == 0:
        # Process mode under a root Worker runs executors as EXECUTOR_USER (nobody): the
        # Worker's private directory is closed to them; a world-readable file is not.
        failed_with(run(unsandboxed, "attack_read", os.path.join(unsandboxed.tmp, "secret.txt")), "PermissionError")
        shared = pathlib.Path(tempfile.mkdtemp(prefix="bx-shared-"))
        shared.chmod(0o755)
        (shared / "open.txt").write_text("anyone")
        assert outputs(run(unsandboxed, "attack_read", str(shared / "open.txt"))) == ["anyone"]
        failed_with(run(sandboxed, "attack_read", str(shared / "open.txt")), "FileNotFoundError")
    else:
        assert outputs(run(unsandboxed, "attack_read", os.path.join(unsandboxed.tmp, "secret.txt"))) == ["s3cret"]
    failed_with(run(sandboxed, "attack_read", os.path.join(sandboxed.tmp, "secret.txt")), "FileNotFoundError")
    failed_with(run(sandboxed, "attack_read", "/etc/passwd"), "FileNotFoundError")
    failed_with(run(sandboxed, "attack_read", os.path.expanduser("~/.bashrc")), "FileNotFoundError")
    still_serving(sandboxed)


def test_no_write_outside_tmp(sandboxed):
    failed_with(run(sandboxed, "attack_write", "/usr/pwned"), "OSError", "Read-only file system")
    repo = pathlib.Path(__file__).resolve().parents[2]
    if repo.parts[1] == "tmp":
        # A checkout under /tmp (CI's fresh clone may be): the sandbox's /tmp is
        # private, so the write lands there and never in the checkout.
        assert outputs(run(sandboxed, "attack_write", str(repo / "pwned"))) == [str(repo / "pwned")]
    else:
        failed_with(run(sandboxed, "attack_write", str(repo / "pwned")), "OSError")
    assert not (repo / "pwned").exists()
    failed_with(run(sandboxed, "attack_write", str(repo / "blockx" / "pwned.py")), "Read-only file system")
    # Paths under /tmp land in its private /tmp, never in the host's.
    target = os.path.join("/tmp", f"bx-pwned-{os.getpid()}-{next(_ids)}")
    assert outputs(run(sandboxed, "attack_write", target)) == [target]
    assert not os.path.exists(target)


def test_a_fork_bomb_is_contained(sandboxed):
    msg = failed_with(run(sandboxed, "attack_fork", 1000), "RuntimeError: fork refused after",
                      "Resource temporarily unavailable")
    forked = int(msg.split("fork refused after ")[1].split()[0])
    assert forked < 32, msg                        # EXECUTOR_MAX_PROCESSES=32, threads included
    still_serving(sandboxed)


def test_memory_past_the_limit_is_refused(sandboxed):
    failed_with(run(sandboxed, "attack_memory", 1024), "USER_ERROR", "MemoryError",
                "the executor's memory limit (256 MB) was reached")
    assert outputs(run(sandboxed, "attack_memory", 32)) == [32]                    # within the limit
    still_serving(sandboxed)


def test_the_worker_cannot_be_signalled(sandboxed):
    failed_with(run(sandboxed, "attack_signal", sandboxed.proc.pid), "ProcessLookupError")
    assert sandboxed.proc.poll() is None
    still_serving(sandboxed)


def test_filling_the_memory_backed_tmp_is_stopped_by_the_memory_limit(sandboxed):
    res = run(sandboxed, "attack_tmpfs", 1024)
    if "rlimits only" in sandboxed.find_event("executor_sandbox")["sandbox"]:
        # No cgroup here: the tmpfs size (the memory limit) is what stops it.
        failed_with(res, "No space left on device")
    else:
        # The cgroup's OOM killer kills the executor; the call says why, and so do
        # the log and the metrics. The pool starts a new executor.
        failed_with(res, "EXECUTOR_LOST", "killed by its memory limit")
        deadline = time.monotonic() + 5    # the log line and the exit come after the call failed
        while not any("by its memory limit" in line for line in list(sandboxed.lines)):
            assert time.monotonic() < deadline, "the executor loss was not logged with its reason"
            time.sleep(0.02)
        # Counted when the exit is reaped, which may come after the call failed.
        while 'blockx_executor_limit_kills_total{limit="memory"} 1.0' not in sandboxed.metrics_text():
            assert time.monotonic() < deadline, "the limit kill was not counted"
            time.sleep(0.02)
    still_serving(sandboxed)


def test_the_workers_environment_and_proc_are_out_of_reach(sandboxed):
    """User code runs as nobody in a PID namespace of its own: the Worker's
    /proc entry is not there, and nothing of its environment leaks in."""
    seen = outputs(run(sandboxed, "attack_environ", sandboxed.proc.pid))[0]
    assert SECRET not in seen and "FileNotFoundError" in seen, seen
    ns = outputs(run(sandboxed, "attack_environ", 1))[0]        # PID 1 is the sandbox's own
    assert SECRET not in ns, ns
    env = outputs(run(sandboxed, "whereami"))[0]["env"]
    assert "BLOCKX_TEST_DB_PASSWORD" not in env, env
    still_serving(sandboxed)


def test_only_loopback_inside(sandboxed):
    names = outputs(run(sandboxed, "netifs"))[0]
    assert names == ["lo"], names


def test_the_oci_cpu_limit_holds(sandboxed):
    if sandboxed.runtime != "oci":
        pytest.skip("EXECUTOR_CPU_MILLICORES is the oci runtime's")
    # The executor's cgroup (runc's, under the Worker's own) carries the CFS quota ...
    from blockx.adapters.executor.oci import own_cgroups
    leaf = own_cgroups()["cpu"] / f"blockx-oci-{sandboxed.proc.pid}" / "exec-0"
    assert (leaf / "cpu.cfs_quota_us").read_text().strip() == str(CPU_MILLICORES * 100)
    assert (leaf / "cpu.cfs_period_us").read_text().strip() == "100000"
    # ... and a call spinning for 1.5 s of wall time gets at most about a quarter of a core.
    share = outputs(run(sandboxed, "cpu_share", 1.5))[0]
    assert share < CPU_MILLICORES / 1000 + 0.1, share
    still_serving(sandboxed)


def test_an_executor_that_dies_after_its_process_limit_refused_forks_is_reported_so(sandboxed):
    res = run(sandboxed, "fork_then_die", 1000)
    failed_with(res, "EXECUTOR_LOST")
    deadline = time.monotonic() + 10      # logged and counted when the exit is reaped
    while not any("exited with code 3 by its process limit" in line for line in list(sandboxed.lines)):
        assert time.monotonic() < deadline, "the executor's exit was not logged with its limit"
        time.sleep(0.05)
    while 'blockx_executor_limit_kills_total{limit="process"} 1.0' not in sandboxed.metrics_text():
        assert time.monotonic() < deadline, "the process-limit exit was not counted"
        time.sleep(0.05)
    deadline = time.monotonic() + 15      # the pool starts a new executor
    while True:
        res = run(sandboxed, "add", 20, 22)
        if res.state == pb.TASK_STATE_SUCCEEDED:
            break
        assert time.monotonic() < deadline, res
        time.sleep(0.2)


def test_what_a_killed_oci_worker_left_is_removed_by_the_next_one(tmp_path_factory):
    from blockx.adapters.executor.oci import own_cgroups

    first = _worker(tmp_path_factory, "sandbox", "oci")
    pid = first.proc.pid
    bundles = list(pathlib.Path(tempfile.gettempdir()).glob(f"blockx-oci-{pid}-*"))
    group = own_cgroups()["pids"] / f"blockx-oci-{pid}"
    assert len(bundles) == 1 and (group / "exec-0").is_dir(), (bundles, group)
    first.proc.kill()                                   # no shutdown: nothing of it cleans up
    first.proc.wait(10)
    deadline = time.monotonic() + 15                    # its executor ends with its connection
    while (group / "exec-0" / "cgroup.procs").exists() and \
            (group / "exec-0" / "cgroup.procs").read_text().strip():
        assert time.monotonic() < deadline, "the killed Worker's executor kept running"
        time.sleep(0.1)
    assert bundles[0].exists()
    second = _worker(tmp_path_factory, "sandbox", "oci")
    try:
        assert not bundles[0].exists() and not group.exists()
        still_serving(second)
    finally:
        second.stop()
        first.stop()
