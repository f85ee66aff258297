"""EXECUTOR_SPAWN_MODE=sandbox: each executor runs inside bubblewrap (bwrap), in
place of a container runtime.

What the executor gets (and nothing else):
- new user, PID, IPC, UTS, cgroup and network namespaces: no network at all (a
  loopback of its own, nothing routed), no view of the Worker's processes, so it
  cannot signal them; it runs as uid/gid 65534 inside, with no capabilities;
- read-only: /usr (and the merged-/usr symlinks /bin, /lib, /lib64, /sbin), the
  dynamic linker's cache, the Python installation (sys.base_prefix), the venv
  (sys.prefix) and the two packages it imports (blockx, blockx_executor);
- a private tmpfs /tmp (its working directory and HOME), sized to the memory limit;
- its own listening socket of the Worker (one per executor, see
  listener.private_socket_path), bound read-only at SANDBOX_SOCKET_PATH: it sees
  no other executor's socket, and the directory around it is the sandbox's
  read-only root, so it can create nothing there. connect() needs no write
  access to the mount: only the socket file's own mode counts;
- the environment the pool built (the allowlist), HOME and TMPDIR set to /tmp;
- --die-with-parent: it dies with the Worker.
Not mounted: the Worker's working directory, the functions directory, home
directories, /etc (but the linker cache and time zone), /var, /srv, /root.
Function code still arrives only through the Worker (CallWaiting function_code).

Limits per executor (EXECUTOR_MEMORY_LIMIT_MB, EXECUTOR_MAX_PROCESSES,
EXECUTOR_MAX_OPEN_FILES): rlimits, which the executor sets on itself at start
(blockx_executor.limits), and, where this process may create cgroups (cgroup v2
unified hierarchy, or the v1 memory and pids controllers), a cgroup per executor
with memory and pids limits. A small /bin/sh step writes its own pid into the
cgroup and then execs bwrap, so nothing runs outside it even for a moment. An
executor killed by the cgroup's memory limit is reported with that reason
(`exit_reason`).

`sandbox_problem()` is the start-up check: bwrap missing, or unable to create its
namespaces (user namespaces refused), stops the Worker with a message; it never
falls back to `process`."""

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("blockx.executor.sandbox")

SANDBOX_UID = 65534
SANDBOX_SOCKET_PATH = "/run/blockx/worker.sock"   # where an executor finds its socket inside
PROBE_TIMEOUT_S = 10
MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    memory_mb: int = 1024       # 0 = none
    max_processes: int = 64     # 0 = none
    max_open_files: int = 1024  # 0 = none


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def sandbox_problem() -> str | None:
    """Why sandbox mode cannot run on this machine, or None."""
    bwrap = bwrap_path()
    if bwrap is None:
        return ("executorSpawnMode (EXECUTOR_SPAWN_MODE) \"sandbox\" needs bubblewrap, and `bwrap` is not "
                "installed: install the Debian package `bubblewrap` (`make bubblewrap`), or use \"process\"")
    try:
        r = subprocess.run([bwrap, "--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                            "--die-with-parent", "--ro-bind", "/", "/", "true"],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"executorSpawnMode (EXECUTOR_SPAWN_MODE) \"sandbox\": running {bwrap} failed: {exc}"
    if r.returncode != 0:
        err = r.stderr.decode(errors="replace").strip() or f"exit code {r.returncode}"
        return ("executorSpawnMode (EXECUTOR_SPAWN_MODE) \"sandbox\": bubblewrap cannot create the "
                f"executor's namespaces here ({err}); user namespaces are probably refused "
                "(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or an AppArmor "
                "restriction): allow them, or use \"process\"")
    return None


def _package_dir(name: str) -> str:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot locate the {name} package for the sandbox")
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _inside(path: str, parents: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in parents)


def merged_usr_links() -> dict[str, str]:
    """The top-level symlinks of a merged-/usr system (/bin -> usr/bin ...)."""
    return {top: os.readlink(top) for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
            if os.path.islink(top)}


def host_readonly_paths(extra: tuple[str, ...] = ()) -> list[str]:
    """The host directories a sandboxed executor sees read-only, besides /usr:
    the Python installation, the venv, the interpreter's directory, the blockx
    and blockx_executor packages, then `extra`; each real path once, none inside
    another (or /usr)."""
    ro: list[str] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable)),
              _package_dir("blockx"), _package_dir("blockx_executor"), *extra):
        real = os.path.realpath(p)
        if not _inside(real, ro + ["/usr"]):
            ro = [q for q in ro if not _inside(q, [real])]
            ro.append(real)
    return ro


class Sandbox:
    runtime = "bwrap"

    def __init__(self, limits: SandboxLimits, *, functions_dir: str = "",
                 bwrap: str | None = None, cgroups: bool = True, extra_readonly: tuple[str, ...] = ()) -> None:
        found = bwrap or bwrap_path()
        if found is None:
            raise RuntimeError(sandbox_problem() or "bwrap is missing")
        self.bwrap: str = found
        self.executor_socket_path = SANDBOX_SOCKET_PATH
        self.limits = limits
        self.functions_dir = os.path.realpath(functions_dir) if functions_dir else ""
        self.extra_readonly = tuple(extra_readonly)
        self.cgroups = CgroupLimits.create(limits) if cgroups else None

    # ---- argv ----
    def _mounts(self) -> list[str]:
        args: list[str] = []
        links = merged_usr_links()
        for top in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if top in links:
                args += ["--symlink", links[top], top]
            elif os.path.isdir(top):
                args += ["--ro-bind", top, top]
        for f in ("/etc/ld.so.cache", "/etc/localtime"):
            args += ["--ro-bind-try", f, f]
        ro = host_readonly_paths(self.extra_readonly)
        for p in ro:
            args += ["--ro-bind", p, p]
        if self.functions_dir and _inside(self.functions_dir, ro):
            args += ["--tmpfs", self.functions_dir]      # code only through the Worker
        return args

    def secret_fd(self, host_fd: int) -> int:
        """The fd number the executor reads its attach secret from (bwrap keeps it)."""
        return host_fd

    def argv(self, executor_id: str, executor_argv: list[str], *, socket_path: str,
             env: dict[str, str] | None = None, secret_fd: int = 0) -> list[str]:
        """bwrap around `executor_argv` (which names SANDBOX_SOCKET_PATH); `socket_path`
        is the executor's private socket on the host. bwrap passes on the
        environment (`env`) and the secret's fd as they are."""
        lim = self.limits
        tmp_size = (lim.memory_mb or 256) * MiB
        argv = [self.bwrap,
                "--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
                "--hostname", "blockx-executor", "--die-with-parent", "--cap-drop", "ALL",
                "--proc", "/proc", "--dev", "/dev",
                "--size", str(tmp_size), "--tmpfs", "/tmp",
                *self._mounts(),
                "--ro-bind", socket_path, self.executor_socket_path,
                "--remount-ro", "/",                 # the sandbox's own root: nothing writable but /tmp
                "--setenv", "HOME", "/tmp", "--setenv", "TMPDIR", "/tmp", "--chdir", "/tmp",
                "--", *executor_argv]
        for flag, value in (("--limit-memory-mb", lim.memory_mb), ("--limit-processes", lim.max_processes),
                            ("--limit-open-files", lim.max_open_files)):
            if value:
                argv += [flag, str(value)]
        if self.cgroups is not None:
            argv = self.cgroups.enter(executor_id, argv)
        return argv

    def limit_kill_reason(self, executor_id: str) -> str | None:
        """"memory limit" when the cgroup's OOM killer has killed in the executor's
        current cgroup; None otherwise. Does not clean up."""
        if self.cgroups is None:
            return None
        return "memory limit" if self.cgroups.new_oom_kills(executor_id) else None

    def exit_reason(self, executor_id: str, returncode: int = 0) -> str | None:
        """After an executor exited: "memory limit" when its cgroup's OOM killer
        killed it, "process limit" when it failed after its pids limit refused
        forks; None otherwise. Removes its cgroup."""
        if self.cgroups is None:
            return None
        return self.cgroups.finish(executor_id, returncode)

    def close(self) -> None:
        if self.cgroups is not None:
            self.cgroups.close()

    def describe(self) -> str:
        lim = self.limits
        where = self.cgroups.kind if self.cgroups is not None else "rlimits only"
        return (f"bwrap sandbox (no network, read-only Python, private /tmp; memory {lim.memory_mb or '-'} MB, "
                f"processes {lim.max_processes or '-'}, open files {lim.max_open_files or '-'}; {where})")


class CgroupLimits:
    """One cgroup per executor under a group of this Worker's own, in the cgroup
    v2 unified hierarchy or the v1 memory + pids controllers."""

    def __init__(self, kind: str, parents: dict[str, Path], limits: SandboxLimits) -> None:
        self.kind = kind                # "cgroup v2" / "cgroup v1"
        self.parents = parents          # controller -> this Worker's group ("" for v2)
        self.limits = limits
        self._oom_base: dict[str, int] = {}   # oom_kill count when the executor's process entered
        self._forks_base: dict[str, int] = {}  # refused forks (pids.events max) then

    @classmethod
    def create(cls, limits: SandboxLimits, root: Path = Path("/sys/fs/cgroup")) -> CgroupLimits | None:
        if not (limits.memory_mb or limits.max_processes):
            return None
        name = f"blockx-worker-{os.getpid()}"
        try:
            if (root / "cgroup.controllers").is_file():
                wanted = {"memory", "pids"}
                if not wanted <= set((root / "cgroup.controllers").read_text().split()):
                    return None
                (root / "cgroup.subtree_control").write_text("+memory +pids")
                group = root / name
                group.mkdir(exist_ok=True)
                (group / "cgroup.subtree_control").write_text("+memory +pids")
                return cls("cgroup v2", {"": group}, limits)
            if (root / "memory").is_dir() and (root / "pids").is_dir():
                parents = {}
                for ctl in ("memory", "pids"):
                    group = root / ctl / name
                    group.mkdir(exist_ok=True)
                    parents[ctl] = group
                return cls("cgroup v1", parents, limits)
        except OSError as exc:
            log.info("no cgroup limits for sandboxed executors (%s); rlimits only", exc)
        return None

    def _leaf(self, ctl: str, executor_id: str) -> Path:
        return self.parents[ctl] / executor_id

    def enter(self, executor_id: str, argv: list[str]) -> list[str]:
        procs = []
        try:
            for ctl, parent in self.parents.items():
                leaf = self._leaf(ctl, executor_id)
                leaf.mkdir(exist_ok=True)
                mem, pids = self.limits.memory_mb * MiB, self.limits.max_processes
                if self.kind == "cgroup v2":
                    if mem:
                        (leaf / "memory.max").write_text(str(mem))
                        _try_write(leaf / "memory.swap.max", "0")
                        _try_write(leaf / "memory.oom.group", "1")
                    if pids:
                        (leaf / "pids.max").write_text(str(pids))
                elif ctl == "memory" and mem:
                    (leaf / "memory.limit_in_bytes").write_text(str(mem))
                    _try_write(leaf / "memory.memsw.limit_in_bytes", str(mem))
                elif ctl == "pids" and pids:
                    (leaf / "pids.max").write_text(str(pids))
                procs.append(str(leaf / "cgroup.procs"))
        except OSError as exc:
            log.warning("cannot set up the cgroup of %s (%s); it runs with rlimits only", executor_id, exc)
            return argv
        self._oom_base[executor_id] = self.oom_kills(executor_id)
        self._forks_base[executor_id] = self.refused_forks(executor_id)
        script = " && ".join(f"echo $$ > {shlex.quote(p)}" for p in procs) + ' && exec "$@"'
        return ["/bin/sh", "-c", script, "blockx-sandbox", *argv]

    def oom_kills(self, executor_id: str) -> int:
        ctl = "" if self.kind == "cgroup v2" else "memory"
        name = "memory.events" if self.kind == "cgroup v2" else "memory.oom_control"
        try:
            text = (self._leaf(ctl, executor_id) / name).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def new_oom_kills(self, executor_id: str) -> int:
        return self.oom_kills(executor_id) - self._oom_base.get(executor_id, 0)

    def refused_forks(self, executor_id: str) -> int:
        ctl = "" if self.kind == "cgroup v2" else "pids"
        try:
            text = (self._leaf(ctl, executor_id) / "pids.events").read_text()
        except (OSError, KeyError):
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "max":
                return int(value)
        return 0

    def finish(self, executor_id: str, returncode: int = 0) -> str | None:
        reason = "memory limit" if self.new_oom_kills(executor_id) else None
        if reason is None and not stopped_normally(returncode) and \
                self.refused_forks(executor_id) > self._forks_base.get(executor_id, 0):
            reason = "process limit"
        for ctl in self.parents:
            try:
                self._leaf(ctl, executor_id).rmdir()
            except OSError:
                pass                    # processes still leaving; retried at close
        return reason

    def close(self) -> None:
        for parent in self.parents.values():
            if not parent.is_dir():
                continue
            for leaf in parent.iterdir():
                if leaf.is_dir():
                    try:
                        leaf.rmdir()
                    except OSError:
                        pass
            try:
                parent.rmdir()
            except OSError:
                pass


def stopped_normally(returncode: int) -> bool:
    """An executor's exit that no limit caused: 0, or SIGTERM (by the signal, or
    143 from an executor that is PID 1 of a container, or runc's report of it)."""
    return returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def _try_write(path: Path, value: str) -> None:
    try:
        path.write_text(value)
    except OSError:
        pass
