"""The oci runtime's bundle (config.json, root filesystem), its runc command line
and its cgroup bookkeeping (no runc run here; tests/e2e/test_sandbox.py runs
the real one)."""
import os
import sys

from blockx.adapters.executor.oci import OciSandbox, own_cgroups
from blockx.adapters.executor.sandbox import SandboxLimits


def _box(tmp_path, **kw):
    cg = tmp_path / "cgroup"
    (cg / "memory" / "worker").mkdir(parents=True)
    (cg / "pids" / "worker").mkdir(parents=True)
    proc = tmp_path / "proc-cgroup"
    proc.write_text("4:memory:/worker\n3:pids:/worker\n")
    box = OciSandbox(SandboxLimits(256, 32, 100),
                     functions_dir=str(tmp_path / "fn"), runc="/usr/sbin/runc", state_dir=str(tmp_path / "b"),
                     cgroup_root=cg, **kw)
    box.cgroups = own_cgroups(cg, str(proc))
    return box


def test_config_isolates_and_binds_only_what_the_executor_needs(tmp_path):
    box = _box(tmp_path, cpu_millicores=500)
    private = str(tmp_path / "w.exec-0.sock")
    cfg = box.config("exec-0", [sys.executable, "-m", "blockx_executor"], socket_path=private,
                     env={"PATH": "/usr/bin", "LANG": "C.UTF-8"})
    proc = cfg["process"]
    assert proc["user"] == {"uid": 65534, "gid": 65534} and proc["noNewPrivileges"] is True
    assert all(v == [] for v in proc["capabilities"].values())
    assert "rlimits" not in proc                        # runc would need CAP_SYS_RESOURCE to raise one
    assert sorted(proc["env"]) == ["HOME=/tmp", "LANG=C.UTF-8", "PATH=/usr/bin", "TMPDIR=/tmp"]
    assert cfg["root"]["readonly"] is True
    ns = {n["type"] for n in cfg["linux"]["namespaces"]}
    assert {"pid", "network", "ipc", "uts", "mount"} <= ns and "user" not in ns
    assert all("path" not in n for n in cfg["linux"]["namespaces"])    # new ones, never the host's
    binds = [m for m in cfg["mounts"] if m["type"] == "bind"]
    assert all("ro" in m["options"] for m in binds), binds            # nothing of the host is writable
    sources = {m["source"]: m["destination"] for m in binds}
    assert sources[private] == "/run/blockx/worker.sock"                # its own socket only
    assert str(tmp_path / "sock") not in sources and os.getcwd() not in sources
    assert os.path.realpath(sys.prefix) in sources and "/etc" not in sources
    assert not any(s == os.path.expanduser("~") for s in sources)
    tmp = next(m for m in cfg["mounts"] if m["destination"] == "/tmp")
    assert tmp["type"] == "tmpfs" and f"size={256 * 1024 * 1024}" in tmp["options"]
    res = cfg["linux"]["resources"]
    assert res["memory"] == {"limit": 256 * 1024 * 1024, "swap": 256 * 1024 * 1024}
    assert res["pids"] == {"limit": 32} and res["cpu"] == {"quota": 50_000, "period": 100_000}
    assert cfg["linux"]["cgroupsPath"] == f"blockx-oci-{os.getpid()}/exec-0"    # under the Worker's own
    assert "/proc/kcore" in cfg["linux"]["maskedPaths"]


def test_runc_command_line_keeps_the_container_and_hands_the_secret_on_fd_3(tmp_path):
    box = _box(tmp_path)
    private = tmp_path / "w.exec-0.sock"
    private.touch()
    argv = box.argv("exec-0", ["python", "-m", "blockx_executor", "--attach-secret-fd", "3"],
                    socket_path=str(private), env={"PATH": "/usr/bin"}, secret_fd=17)
    assert argv[:2] == ["/bin/bash", "-c"] and argv[2] == 'exec "$@" 3<&17 17<&-'
    run = argv[4:]
    assert run[0] == "/usr/sbin/runc" and "--keep" in run and run[run.index("--preserve-fds") + 1] == "1"
    assert run[-1] == f"blockx-oci-{os.getpid()}-exec-0"
    import json
    cfg = json.loads((tmp_path / "b" / "exec-0" / "config.json").read_text())
    args = cfg["process"]["args"]
    # No RLIMIT_NPROC: uid 65534 is shared with every other nobody process of the host.
    assert args[-4:] == ["--limit-memory-mb", "256", "--limit-open-files", "100"]
    assert oct((tmp_path / "b").stat().st_mode & 0o777) == "0o700"
    assert box.secret_fd(17) == 3
    if os.geteuid() == 0:
        assert private.stat().st_uid == 65534


def test_the_root_filesystem_is_mount_points_only(tmp_path):
    box = _box(tmp_path)
    root = tmp_path / "b" / "rootfs"
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert all(p.stat().st_size == 0 for p in files), files
    assert (root / "tmp").stat().st_mode & 0o1777 == 0o1777
    assert box.describe().startswith("oci sandbox via runc (no network")


def test_oom_and_pids_reasons_from_the_containers_cgroup(tmp_path):
    box = _box(tmp_path)
    leaf_mem = tmp_path / "cgroup" / "memory" / "worker" / f"blockx-oci-{os.getpid()}" / "exec-0"
    leaf_pids = tmp_path / "cgroup" / "pids" / "worker" / f"blockx-oci-{os.getpid()}" / "exec-0"
    leaf_mem.mkdir(parents=True)
    leaf_pids.mkdir(parents=True)
    (leaf_mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")
    (leaf_pids / "pids.events").write_text("max 0\n")
    assert box.limit_kill_reason("exec-0") is None and box.exit_reason("exec-0") is None
    (leaf_pids / "pids.events").write_text("max 4\n")
    assert box.exit_reason("exec-0", 143) is None            # stopped by the pool: no limit's doing
    assert box.exit_reason("exec-0", 3) == "process limit"
    (leaf_mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    assert box.limit_kill_reason("exec-0") == "memory limit" and box.exit_reason("exec-0") == "memory limit"


def test_own_cgroups_of_a_hybrid_host(tmp_path):
    for d in ("memory", "pids", "cpu,cpuacct", "systemd", "unified"):
        (tmp_path / d).mkdir()
    proc = tmp_path / "cgroup"
    proc.write_text("9:name=systemd:/\n5:cpu,cpuacct:/a\n4:memory:/process_api/x\n3:pids:/\n0::/\n")
    got = own_cgroups(tmp_path, str(proc))
    assert got["memory"] == tmp_path / "memory" / "process_api" / "x"
    assert got["cpu"] == got["cpuacct"] == tmp_path / "cpu,cpuacct" / "a"
    assert got["pids"] == tmp_path / "pids" and got[""] == tmp_path / "unified"
    assert got["name=systemd"] == tmp_path / "systemd"


def test_what_a_killed_worker_left_is_removed_by_the_next_one(tmp_path):
    import subprocess

    from blockx.adapters.executor.oci import remove_stale_bundles

    gone = subprocess.Popen(["true"])
    gone.wait()                                     # a pid that no longer runs
    stale = tmp_path / f"blockx-oci-{gone.pid}-x1"
    (stale / "runc").mkdir(parents=True)
    (stale / "exec-0").mkdir()
    (stale / "exec-0" / "config.json").write_text("{}")
    live = tmp_path / f"blockx-oci-{os.getpid()}-x2"
    live.mkdir()
    cg = tmp_path / "cg"
    (cg / f"blockx-oci-{gone.pid}" / "exec-0").mkdir(parents=True)
    removed = remove_stale_bundles("/usr/sbin/runc", tmp_path, {"memory": cg})
    assert removed == [str(stale)] and not stale.exists() and live.exists()
    assert not (cg / f"blockx-oci-{gone.pid}").exists()


def test_the_container_is_deleted_off_the_loop_and_waited_for_at_the_next_start(tmp_path):
    import time

    runc = tmp_path / "runc"
    runc.write_text('#!/bin/sh\n# --root STATE delete --force NAME\nsleep 0.5; rm -rf "$2/$5"\n')
    runc.chmod(0o755)
    box = _box(tmp_path)
    box.runc = str(runc)
    name = f"blockx-oci-{os.getpid()}-exec-0"
    (box.state_root / name).mkdir(parents=True)            # a kept container of an exited executor
    t0 = time.monotonic()
    assert box.exit_reason("exec-0", 0) is None
    assert time.monotonic() - t0 < 0.4, "exit_reason waited for runc delete"
    assert (box.state_root / name).exists()                 # still being deleted
    box.remove("exec-0")                                     # the slot's next start waits for it
    assert not (box.state_root / name).exists()
    box.close()
