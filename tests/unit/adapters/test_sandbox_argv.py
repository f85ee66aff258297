"""The sandbox's bwrap command line and its cgroup bookkeeping (no bwrap run here;
tests/e2e/test_sandbox.py runs the real one)."""
import os
import sys

from blockx.adapters.executor.sandbox import CgroupLimits, Sandbox, SandboxLimits


def _pairs(argv, flag):
    return [(argv[i + 1], argv[i + 2]) for i, a in enumerate(argv) if a == flag]


def test_bwrap_argv_isolates_and_binds_only_what_the_executor_needs(tmp_path):
    sock = tmp_path / "sock" / "w.sock"
    box = Sandbox(SandboxLimits(256, 32, 100), functions_dir=str(tmp_path / "fn"),
                  bwrap="/usr/bin/bwrap", cgroups=False)
    private = str(tmp_path / "sock" / "w.exec-0.sock")
    argv = box.argv("exec-0", [sys.executable, "-m", "blockx_executor", "--executor-id", "exec-0"],
                    socket_path=private)
    head = argv[:argv.index("--")]
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent"):
        assert flag in head
    assert ("/", ) == tuple(head[i + 1] for i, a in enumerate(head) if a == "--remount-ro")
    assert _pairs(head, "--bind") == []                 # nothing of the host is writable
    # Its own socket only, read-only, at a fixed path; never the socket directory.
    assert (private, "/run/blockx/worker.sock") in _pairs(head, "--ro-bind")
    ro = {src for src, _ in _pairs(head, "--ro-bind")}
    assert str(tmp_path / "sock") not in ro and str(sock) not in ro
    assert os.path.realpath(sys.prefix) in ro and os.getcwd() not in ro
    assert not any(p == os.path.expanduser("~") for p in ro)
    assert argv[-6:] == ["--limit-memory-mb", "256", "--limit-processes", "32", "--limit-open-files", "100"]


def test_cgroup_v1_limits_join_and_oom_reason(tmp_path):
    (tmp_path / "memory").mkdir()
    (tmp_path / "pids").mkdir()
    cg = CgroupLimits.create(SandboxLimits(256, 32, 0), root=tmp_path)
    assert cg is not None and cg.kind == "cgroup v1"
    argv = cg.enter("exec-0", ["bwrap", "x"])
    mem = cg.parents["memory"] / "exec-0"
    pids = cg.parents["pids"] / "exec-0"
    assert (mem / "memory.limit_in_bytes").read_text() == str(256 * 1024 * 1024)
    assert (pids / "pids.max").read_text() == "32"
    assert argv[:2] == ["/bin/sh", "-c"] and argv[-2:] == ["bwrap", "x"]
    assert f"echo $$ > {mem / 'cgroup.procs'}" in argv[2] and 'exec "$@"' in argv[2]
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    assert cg.oom_kills("exec-0") == 0
    (pids / "pids.events").write_text("max 2\n")
    assert cg.finish("exec-0", -15) is None                  # stopped by the pool
    cg.enter("exec-0", ["bwrap", "x"])                       # counts from here
    assert cg.finish("exec-0", 1) is None
    (pids / "pids.events").write_text("max 5\n")
    assert cg.finish("exec-0", 1) == "process limit"
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert cg.finish("exec-0") == "memory limit"


def test_cgroup_v2_limits(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu memory pids\n")
    cg = CgroupLimits.create(SandboxLimits(128, 16, 0), root=tmp_path)
    assert cg is not None and cg.kind == "cgroup v2"
    assert (tmp_path / "cgroup.subtree_control").read_text() == "+memory +pids"
    cg.enter("exec-1", ["bwrap"])
    leaf = cg.parents[""] / "exec-1"
    assert (leaf / "memory.max").read_text() == str(128 * 1024 * 1024) and (leaf / "pids.max").read_text() == "16"
    (leaf / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert cg.finish("exec-1") == "memory limit"


def test_no_cgroups_without_the_controllers(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io\n")
    assert CgroupLimits.create(SandboxLimits(128, 16, 0), root=tmp_path) is None
    assert CgroupLimits.create(SandboxLimits(0, 0, 10), root=tmp_path) is None
