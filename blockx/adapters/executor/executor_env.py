"""Where functions find packages the Worker does not have (EXECUTOR_PYTHON,
EXECUTOR_SITE_PACKAGES), in every spawn mode.

- EXECUTOR_SITE_PACKAGES: directories put on the executors' PYTHONPATH (after
  the executor runtime), e.g. one made with `pip install --target DIR pkg`.
- EXECUTOR_PYTHON: the interpreter executors run, e.g. `/opt/fn-venv/bin/python`
  of a venv with the functions' packages. It must be the Worker's Python
  version (X.Y): the executor runtime it imports (the blockx and
  blockx_executor packages, greenlet, orjson) is the Worker's own, built for
  that version. The Worker puts that runtime first on the interpreter's path
  through a directory of its own holding only links to those four packages, so
  nothing else of the Worker's environment comes along, and the venv's own
  greenlet/orjson cannot shadow the ones the executor was built with.

The sandboxes (bwrap and oci) bind all of it read-only at the same paths: the
interpreter's prefixes, the runtime directory and the site-packages
directories; process-mode executors under a root Worker reach them through the
same read-only binds as their own Python (blockx_executor.privileges)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

__all__ = ["ExecutorEnvironment", "RUNTIME_PACKAGES", "executor_env_problems"]

RUNTIME_PACKAGES = ("blockx", "blockx_executor", "greenlet", "orjson")
PROBE_TIMEOUT_S = 20
_PROBE = ("import json, os, sys; print(json.dumps({'version': list(sys.version_info[:2]), "
          "'prefix': sys.prefix, 'base_prefix': sys.base_prefix, "
          "'executable': os.path.realpath(sys.executable)}))")


def _package_dir(name: str) -> str:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"cannot locate the {name} package for the executors")
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def probe_python(python: str) -> dict:
    """Version and prefixes of `python`; raises RuntimeError with the reason."""
    try:
        r = subprocess.run([python, "-I", "-c", _PROBE], stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot run {python!r}: {exc}") from None
    if r.returncode != 0:
        raise RuntimeError(f"{python!r} failed (exit {r.returncode}): {r.stderr.decode(errors='replace')[-300:]}")
    return json.loads(r.stdout)


def executor_env_problems(python: str, site_packages: list[str], *, python_setting: str = "executorPython",
                          site_setting: str = "executorSitePackages") -> list[str]:
    """What keeps these settings from working here (empty: nothing)."""
    out = []
    if python:
        if not os.path.isabs(python):
            out.append(f"{python_setting} must be an absolute path to a Python interpreter (got {python!r})")
        else:
            try:
                info = probe_python(python)
            except (RuntimeError, ValueError) as exc:
                out.append(f"{python_setting}: {exc}")
            else:
                want = list(sys.version_info[:2])
                if info["version"] != want:
                    got = ".".join(map(str, info["version"]))
                    mine = ".".join(map(str, want))
                    out.append(f"{python_setting}: {python} is Python {got}, and the executors need the Worker's "
                               f"Python {mine} (their runtime, blockx with greenlet and orjson, is built for it): "
                               f"make the venv with python{mine} (`python{mine} -m venv DIR`)")
    for d in site_packages:
        if not os.path.isabs(d) or not os.path.isdir(d):
            out.append(f"{site_setting}: {d!r} is not an absolute path to a directory")
    return out


class ExecutorEnvironment:
    """The interpreter executors run, the PYTHONPATH they get and the host
    directories a sandbox must bind read-only for it."""

    def __init__(self, python: str = "", site_packages: list[str] | tuple[str, ...] = ()) -> None:
        self.site_packages = [os.path.realpath(d) for d in site_packages]
        self.runtime_dir = ""
        self._python_dirs: list[str] = []
        if python:
            info = probe_python(python)
            self.python = python
            self._python_dirs = [info["prefix"], info["base_prefix"], os.path.dirname(info["executable"])]
            self.runtime_dir = tempfile.mkdtemp(prefix="blockx-executor-runtime-")
            os.chmod(self.runtime_dir, 0o755)               # the executors' user reads it
            for name in RUNTIME_PACKAGES:
                os.symlink(_package_dir(name), os.path.join(self.runtime_dir, name))
        else:
            self.python = sys.executable

    @property
    def own_python(self) -> bool:
        return not self.runtime_dir

    def extra_env(self, environ: dict[str, str]) -> dict[str, str]:
        """PYTHONPATH for the executors, over `environ` (the environment the pool
        builds for them; {} when nothing is to add). With an interpreter of its
        own, the Worker's PYTHONPATH is not passed on."""
        parts = ([self.runtime_dir] if self.runtime_dir else []) + self.site_packages
        if self.own_python and environ.get("PYTHONPATH"):
            parts.append(environ["PYTHONPATH"])
        if not parts or (self.own_python and not self.site_packages):
            return {}
        env = {"PYTHONPATH": os.pathsep.join(parts)}
        if not self.own_python:
            env["VIRTUAL_ENV"] = self._python_dirs[0]      # the Worker's venv is not the executors'
        return env

    def readonly_paths(self) -> tuple[str, ...]:
        """Host directories a sandbox binds read-only besides its defaults."""
        return tuple(os.path.realpath(p) for p in (*self._python_dirs, *([self.runtime_dir] if self.runtime_dir
                                                                          else []), *self.site_packages))

    def describe(self) -> str:
        parts = [f"python {self.python}" + ("" if self.own_python else " (with the Worker's executor runtime)")]
        if self.site_packages:
            parts.append("site-packages " + ", ".join(self.site_packages))
        return "; ".join(parts)

    def close(self) -> None:
        if self.runtime_dir:
            shutil.rmtree(self.runtime_dir, ignore_errors=True)
