"""EXECUTOR_SANDBOX_RUNTIME=oci: each sandboxed executor runs as an OCI container,
started directly by `runc` from a bundle this module writes (no containerd: the
daemon, its shim per container and an image import add time to every spawn and a
service to run, and buy nothing a one-process container needs).

The bundle, per executor (a root-only directory of this Worker's, removed at close):
- a shared, read-only root filesystem that holds only mount points and the
  merged-/usr symlinks; into it go read-only bind mounts of /usr, the dynamic
  linker's cache, the time zone, the Python installation, the venv, the blockx
  and blockx_executor packages (and the executor's own interpreter and extra
  site-packages, see executor_env), a private tmpfs /tmp (sized to the memory
  limit), /proc, a minimal /dev, and the executor's own socket of the Worker,
  read-only at SANDBOX_SOCKET_PATH;
- config.json: new PID, network (loopback only), IPC, UTS, mount and cgroup
  namespaces; uid/gid 65534 with no capabilities and no_new_privs; the pool's
  environment allowlist with HOME and TMPDIR set to /tmp; /proc's sensitive files
  masked as runc's defaults do; cgroup limits in linux.resources: memory (no
  swap), pids and CPU (a CFS quota). No process.rlimits: runc would need
  CAP_SYS_RESOURCE to raise one, and the executor lowers its own at start.

The executor is PID 1 of its namespace. `runc run --keep` stays its parent (the
Worker watches runc's exit, and runc forwards SIGTERM), and keeps the cgroup
after the exit, so the OOM kill count can still be read: then `runc delete`
removes the container. What a Worker that was killed left behind (its bundle
directory, runc state, the executors' cgroups; its executors exit when their
connection closes) is removed by the next oci Worker that starts on the host.

`oci_problem()` is the start-up check: no `runc` on PATH, not root, or the
memory/pids cgroup controllers missing stops the Worker with a message; it never
falls back to bubblewrap or `process`."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from blockx.adapters.executor.sandbox import (
    MiB, SANDBOX_SOCKET_PATH, SANDBOX_UID, SandboxLimits, host_readonly_paths, merged_usr_links, stopped_normally,
)

log = logging.getLogger("blockx.executor.oci")

SETTING = "executorSandboxRuntime (EXECUTOR_SANDBOX_RUNTIME) \"oci\""
CGROUP_ROOT = Path("/sys/fs/cgroup")
CPU_PERIOD_US = 100_000
DELETE_TIMEOUT_S = 10
_SECRET_FD = 3          # runc --preserve-fds 1 hands the container fd 3
_MASKED = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
           "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"]
_READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


def runc_path() -> str | None:
    return shutil.which("runc")


def _controllers(root: Path) -> set[str]:
    """The cgroup controllers runc can use here: the unified hierarchy's, or the
    v1 hierarchies mounted (hybrid machines have both; runc uses the v1 ones)."""
    if (root / "cgroup.controllers").is_file():
        return set((root / "cgroup.controllers").read_text().split())
    if not root.is_dir():
        return set()
    return {ctl for p in root.iterdir() if p.is_dir() for ctl in p.name.split(",")}


def oci_problem() -> str | None:
    """Why the oci runtime cannot run on this machine, or None."""
    runc = runc_path()
    if runc is None:
        return (f"{SETTING} needs `runc`, and it is not on PATH: install the Debian package `runc` "
                "(`make runc`), or use \"bwrap\"")
    if os.geteuid() != 0:
        return (f"{SETTING}: runc needs the Worker to run as root (it creates the executors' namespaces "
                "and cgroups); run the Worker as root, or use \"bwrap\"")
    missing = {"memory", "pids"} - _controllers(CGROUP_ROOT)
    if missing:
        return (f"{SETTING}: the cgroup controllers {', '.join(sorted(missing))} are not available under "
                f"{CGROUP_ROOT}, so the executors' limits cannot hold; mount them, or use \"bwrap\"")
    try:
        r = subprocess.run([runc, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{SETTING}: running {runc} failed: {exc}"
    if r.returncode != 0:
        return f"{SETTING}: `{runc} --version` failed: {r.stderr.decode(errors='replace').strip()}"
    return None


def own_cgroups(root: Path = CGROUP_ROOT, proc_cgroup: str = "/proc/self/cgroup") -> dict[str, Path]:
    """Each cgroup hierarchy's directory of this process, by controller (v1
    names, "name=systemd", and "" for the unified hierarchy): runc puts a
    relative cgroupsPath under runc's own cgroups, which are the Worker's."""
    out: dict[str, Path] = {}
    unified = root if (root / "cgroup.controllers").is_file() else root / "unified"
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        hid, ctls, path = line.split(":", 2)
        if hid == "0":
            if unified.is_dir():
                out[""] = unified / path.lstrip("/")
            continue
        mount = root / ctls.removeprefix("name=")
        if not mount.is_dir():
            continue
        for ctl in ctls.split(","):
            out[ctl] = mount / path.lstrip("/")
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_bundles(runc: str, parent: Path, cgroups: dict[str, Path]) -> list[str]:
    """Remove the bundle directories (blockx-oci-<pid>-*) of Worker processes
    that no longer run, their containers (`runc delete --force`) and their cgroup
    groups; returns the directories removed."""
    removed: list[str] = []
    try:
        entries = list(parent.glob("blockx-oci-*-*"))
    except OSError:
        return removed
    for d in entries:
        pid_text = d.name.removeprefix("blockx-oci-").split("-", 1)[0]
        if not pid_text.isdigit() or _alive(int(pid_text)) or not d.is_dir() or d.stat().st_uid != os.geteuid():
            continue
        state = d / "runc"
        for container in (state.iterdir() if state.is_dir() else ()):
            try:
                subprocess.run([runc, "--root", str(state), "delete", "--force", container.name],
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=DELETE_TIMEOUT_S)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for where in {c / f"blockx-oci-{pid_text}" for c in cgroups.values()}:
            for leaf in (where.iterdir() if where.is_dir() else ()):
                if leaf.is_dir():
                    try:
                        leaf.rmdir()
                    except OSError:
                        pass
            try:
                where.rmdir()
            except OSError:
                pass
        shutil.rmtree(d, ignore_errors=True)
        removed.append(str(d))
    if removed:
        log.info("removed %d bundle director%s of oci Workers that no longer run", len(removed),
                 "y" if len(removed) == 1 else "ies")
    return removed


class OciSandbox:
    """Builds each executor's bundle and `runc run` command line; reads why a
    container died; removes containers and bundles."""

    runtime = "oci"

    def __init__(self, limits: SandboxLimits, *, functions_dir: str = "",
                 cpu_millicores: int = 0, runc: str | None = None, extra_readonly: tuple[str, ...] = (),
                 state_dir: str | None = None, cgroup_root: Path = CGROUP_ROOT) -> None:
        found = runc or runc_path()
        if found is None:
            raise RuntimeError(oci_problem() or "runc is missing")
        self.runc: str = found
        self.executor_socket_path = SANDBOX_SOCKET_PATH
        self.limits = limits
        self.cpu_millicores = cpu_millicores
        self.functions_dir = os.path.realpath(functions_dir) if functions_dir else ""
        self.dir = Path(state_dir or tempfile.mkdtemp(prefix=f"blockx-oci-{os.getpid()}-"))
        self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)          # config.json holds the environment
        remove_stale_bundles(self.runc, self.dir.parent, own_cgroups(cgroup_root))
        self.state_root = self.dir / "runc"
        self.cgroup_parent = f"blockx-oci-{os.getpid()}"
        self.cgroup_root = cgroup_root
        self.cgroups = own_cgroups(cgroup_root)      # where runc puts this Worker's containers
        self.readonly = host_readonly_paths(extra_readonly)
        self.rootfs = self.dir / "rootfs"
        self._build_rootfs()
        self._names: dict[str, str] = {}           # executor id -> container id
        self._deleting: dict[str, subprocess.Popen] = {}   # executor id -> its `runc delete`
        self._oom_base: dict[str, int] = {}

    # ---- the bundle ----
    def _build_rootfs(self) -> None:
        root = self.rootfs
        root.mkdir(exist_ok=True)
        links = merged_usr_links()
        for top, target in links.items():
            link = root / top.lstrip("/")
            if not link.is_symlink():
                link.symlink_to(target)
        dirs = ["/proc", "/dev", "/tmp", os.path.dirname(SANDBOX_SOCKET_PATH), "/etc", "/sys"]
        dirs += self._system_dirs() + [p for p in self.readonly if os.path.isdir(p)]
        for d in dirs:
            (root / d.lstrip("/")).mkdir(parents=True, exist_ok=True)
        for f in [SANDBOX_SOCKET_PATH, "/etc/ld.so.cache", "/etc/localtime",
                  *(p for p in self.readonly if os.path.isfile(p))]:
            (root / f.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            (root / f.lstrip("/")).touch(exist_ok=True)
        if self.functions_dir:
            (root / self.functions_dir.lstrip("/")).mkdir(parents=True, exist_ok=True)
        os.chmod(root, 0o755)
        os.chmod(root / "tmp", 0o1777)       # runc gives a tmpfs its mount point's mode

    @staticmethod
    def _system_dirs() -> list[str]:
        links = merged_usr_links()
        return [top for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
                if top not in links and os.path.isdir(top)]

    def _mounts(self, socket_path: str) -> list[dict]:
        lim = self.limits
        tmp_size = (lim.memory_mb or 256) * MiB
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "nodev", "mode=1777", f"size={tmp_size}"]},
        ]
        ro = ["rbind", "ro", "nosuid", "nodev"]
        for p in self._system_dirs():
            mounts.append({"destination": p, "type": "bind", "source": p, "options": ro})
        for p in self.readonly:
            mounts.append({"destination": p, "type": "bind", "source": p, "options": ro})
        for f in ("/etc/ld.so.cache", "/etc/localtime"):
            if os.path.exists(f):
                mounts.append({"destination": f, "type": "bind", "source": os.path.realpath(f), "options": ro})
        if self.functions_dir and any(self.functions_dir == p or self.functions_dir.startswith(p + "/")
                                      for p in self.readonly):
            mounts.append({"destination": self.functions_dir, "type": "tmpfs", "source": "tmpfs",
                           "options": ["ro", "nosuid", "nodev", "size=4k"]})   # code only through the Worker
        mounts.append({"destination": SANDBOX_SOCKET_PATH, "type": "bind", "source": socket_path,
                       "options": ["bind", "ro", "nosuid", "nodev", "noexec"]})
        return mounts

    def _resources(self) -> dict:
        lim = self.limits
        res: dict = {"devices": [{"allow": False, "access": "rwm"}]}
        if lim.memory_mb:
            res["memory"] = {"limit": lim.memory_mb * MiB, "swap": lim.memory_mb * MiB}
        if lim.max_processes:
            res["pids"] = {"limit": lim.max_processes}
        if self.cpu_millicores:
            res["cpu"] = {"quota": self.cpu_millicores * CPU_PERIOD_US // 1000, "period": CPU_PERIOD_US}
        return res

    def config(self, executor_id: str, executor_argv: list[str], *, socket_path: str,
               env: dict[str, str]) -> dict:
        proc_env = {**env, "HOME": "/tmp", "TMPDIR": "/tmp"}
        no_caps: list[str] = []
        return {
            "ociVersion": "1.0.2",
            "process": {
                "terminal": False,
                "user": {"uid": SANDBOX_UID, "gid": SANDBOX_UID},
                "args": list(executor_argv),
                "env": [f"{k}={v}" for k, v in proc_env.items()],
                "cwd": "/tmp",
                "capabilities": {k: no_caps for k in ("bounding", "effective", "inheritable", "permitted",
                                                      "ambient")},
                "noNewPrivileges": True,
            },
            "root": {"path": str(self.rootfs), "readonly": True},
            "hostname": "blockx-executor",
            "mounts": self._mounts(socket_path),
            "linux": {
                "namespaces": [{"type": t} for t in ("pid", "network", "ipc", "uts", "mount", "cgroup")],
                "cgroupsPath": f"{self.cgroup_parent}/{executor_id}",
                "resources": self._resources(),
                "maskedPaths": _MASKED,
                "readonlyPaths": _READONLY,
            },
        }

    def secret_fd(self, host_fd: int) -> int:
        """The fd number the executor reads its attach secret from."""
        return _SECRET_FD

    def argv(self, executor_id: str, executor_argv: list[str], *, socket_path: str,
             env: dict[str, str] | None = None, secret_fd: int = 0) -> list[str]:
        """`runc run` of a fresh bundle for `executor_argv` (which names
        SANDBOX_SOCKET_PATH and, with a secret, fd 3); `socket_path` is the
        executor's private socket on the host, `secret_fd` the pipe on the host."""
        lim = self.limits
        argv = list(executor_argv)
        # RLIMIT_NPROC counts every process of uid 65534 on the host (no user
        # namespace here), so the pids cgroup alone limits processes.
        for flag, value in (("--limit-memory-mb", lim.memory_mb), ("--limit-open-files", lim.max_open_files)):
            if value:
                argv += [flag, str(value)]
        # No user namespace: the executor is uid 65534 on the host too, so its own
        # socket (0600, in the Worker's 0700 directory no other user can enter)
        # becomes its. The attach secret still decides who attaches.
        if os.geteuid() == 0:                            # always, but in unit tests
            os.chown(socket_path, SANDBOX_UID, SANDBOX_UID)
        self.remove(executor_id)                        # a container of an earlier run of this slot
        name = f"{self.cgroup_parent}-{executor_id}"
        self._names[executor_id] = name
        bundle = self.dir / executor_id
        bundle.mkdir(mode=0o700, exist_ok=True)
        cfg = self.config(executor_id, argv, socket_path=socket_path, env=dict(env or {}))
        tmp = bundle / "config.json.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(cfg, f)
        os.replace(tmp, bundle / "config.json")
        self._oom_base[executor_id] = 0                  # a fresh cgroup per container
        run = [self.runc, "--root", str(self.state_root), "run", "--keep", "--no-new-keyring",
               "--bundle", str(bundle)]
        if secret_fd:
            # Popen keeps the pipe at its own number; runc passes on fds from 3 (bash:
            # dash takes one-digit fds only).
            run += ["--preserve-fds", "1", name]
            return ["/bin/bash", "-c", f'exec "$@" {_SECRET_FD}<&{secret_fd} {secret_fd}<&-', "blockx-oci", *run]
        return [*run, name]

    # ---- the executor's cgroup ----
    def _leaf(self, controller: str, executor_id: str) -> Path:
        return self.cgroups.get(controller, Path("/nonexistent")) / self.cgroup_parent / executor_id

    def _event(self, executor_id: str, controller: str, filename: str, key: str) -> int:
        try:
            text = (self._leaf(controller, executor_id) / filename).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            k, _, value = line.partition(" ")
            if k == key:
                return int(value)
        return 0

    def oom_kills(self, executor_id: str) -> int:
        v2 = (self.cgroup_root / "cgroup.controllers").is_file()
        return self._event(executor_id, "memory", "memory.events" if v2 else "memory.oom_control", "oom_kill")

    def refused_forks(self, executor_id: str) -> int:
        return self._event(executor_id, "pids", "pids.events", "max")

    def limit_kill_reason(self, executor_id: str) -> str | None:
        """"memory limit" when the container's cgroup OOM-killed in it, else None."""
        return "memory limit" if self.oom_kills(executor_id) > self._oom_base.get(executor_id, 0) else None

    def exit_reason(self, executor_id: str, returncode: int = 0) -> str | None:
        """After an executor exited: "memory limit" when its cgroup's OOM killer
        killed it, "process limit" when it failed (a returncode other than 0 or
        SIGTERM's) after the pids limit refused forks; None otherwise. Removes the
        container."""
        reason = self.limit_kill_reason(executor_id)
        if reason is None and not stopped_normally(returncode) and self.refused_forks(executor_id):
            reason = "process limit"
        self._remove_later(executor_id)
        return reason

    def _delete_argv(self, name: str) -> list[str]:
        return [self.runc, "--root", str(self.state_root), "delete", "--force", name]

    def _remove_later(self, executor_id: str) -> None:
        """`runc delete` without waiting for it (this runs on the Worker's loop,
        and runc takes tens of ms, more on a loaded host); the next start of
        the slot, or close, waits for it."""
        name = self._names.pop(executor_id, f"{self.cgroup_parent}-{executor_id}")
        if not (self.state_root / name).exists():
            return
        try:
            self._deleting[executor_id] = subprocess.Popen(
                self._delete_argv(name), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        except OSError as exc:
            log.warning("cannot remove the container of %s (%s)", executor_id, exc)

    def remove(self, executor_id: str) -> None:
        """Wait for a pending `runc delete` of the slot, then delete what is left."""
        pending = self._deleting.pop(executor_id, None)
        if pending is not None:
            try:
                pending.wait(DELETE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                pending.kill()
                pending.wait()
        name = self._names.pop(executor_id, f"{self.cgroup_parent}-{executor_id}")
        if not (self.state_root / name).exists():
            return
        try:
            subprocess.run(self._delete_argv(name), stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=DELETE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("cannot remove the container of %s (%s)", executor_id, exc)

    def close(self) -> None:
        for executor_id in list(self._deleting):
            self.remove(executor_id)
        if self.state_root.is_dir():
            for entry in self.state_root.iterdir():
                self.remove(entry.name.removeprefix(f"{self.cgroup_parent}-"))
        for parent in {d / self.cgroup_parent for d in self.cgroups.values()}:
            try:
                parent.rmdir()          # runc removed the executors' cgroups, not this group
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def describe(self) -> str:
        lim = self.limits
        cpu = f"{self.cpu_millicores / 1000:g} CPU" if self.cpu_millicores else "CPU -"
        return (f"oci sandbox via runc (no network, read-only Python, private /tmp; memory {lim.memory_mb or '-'} "
                f"MB, processes {lim.max_processes or '-'}, open files {lim.max_open_files or '-'}, {cpu}; "
                "cgroups by runc)")
