"""The OCI image and podman for the container suites: `make image` (once per test
run; podman's layer cache makes a second build cheap), and podman commands with
this repository's containers.conf (runc, no default ulimits, cgroupfs)."""
from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
IMAGE = "localhost/blockx-worker:latest"
CONTAINERS_CONF = str(ROOT / "deploy" / "image" / "containers.conf")


def env() -> dict[str, str]:
    return {**os.environ, "CONTAINERS_CONF": CONTAINERS_CONF}


def podman(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    exe = shutil.which("podman")
    assert exe, "podman is missing (`make podman` installs it)"
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, env=env())
    if check:
        assert r.returncode == 0, f"podman {' '.join(args)}: exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@functools.lru_cache(maxsize=1)
def build_image() -> tuple[str, float]:
    """`make image` (the test's own build, so the image is this checkout's); returns
    the image name and the seconds the build took."""
    t0 = time.monotonic()
    r = subprocess.run(["make", "-s", "image", f"IMAGE={IMAGE}"], cwd=ROOT, capture_output=True, text=True,
                       timeout=1500, env=env())
    assert r.returncode == 0, f"make image failed:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return IMAGE, time.monotonic() - t0


def readable_dir(prefix: str) -> pathlib.Path:
    """A directory the image's non-root user (uid 10001) can read (pytest's tmp_path is 0700 root)."""
    import tempfile
    d = pathlib.Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def share(path: pathlib.Path, mode: int = 0o644) -> pathlib.Path:
    path.chmod(mode)
    return path
