"""`blockx top` as a person sees it: a real Worker with real
executors, `blockx top` running in tmux, the screen read with capture-pane until
the executors show, work submitted until the rates move, `q` pressed, exit 0.
Set BLOCKX_TOP_CAPTURE=FILE to keep the screen (with executors and rates)."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest

pytestmark = pytest.mark.e2e      # `make test` installs tmux (make tmux): a missing tmux fails, not skips

BLOCKX = pathlib.Path(sys.executable).with_name("blockx")


class Tmux:
    """One private tmux server (its own socket) holding one session."""

    def __init__(self, name: str, width: int, height: int, command: str) -> None:
        self.sock = f"blockx-top-{os.getpid()}-{name}"
        self.name = name
        subprocess.run(["tmux", "-L", self.sock, "new-session", "-d", "-x", str(width), "-y", str(height),
                        "-s", name, command], check=True, timeout=10)

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.sock, "capture-pane", "-p", "-t", self.name],
                              capture_output=True, text=True, timeout=10).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "-L", self.sock, "send-keys", "-t", self.name, *keys], check=True, timeout=10)

    def wait_screen(self, pred, timeout: float = 20.0, what: str = "") -> str:
        deadline = time.monotonic() + timeout
        text = self.screen()
        while not pred(text):
            assert time.monotonic() < deadline, f"the screen never showed {what}:\n{text}"
            time.sleep(0.1)
            text = self.screen()
        return text

    def kill(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True, timeout=10)


def _top(w, tmp: pathlib.Path, name: str, width: int, height: int) -> tuple[Tmux, pathlib.Path]:
    rc = tmp / f"{name}.rc"
    cmd = (f"{BLOCKX} top --worker 127.0.0.1:{w.port} --interval 0.5; echo $? > {rc}; sleep 60")
    return Tmux(name, width, height, cmd), rc


def _wait_rc(rc: pathlib.Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while not (rc.exists() and rc.read_text().strip()):
        assert time.monotonic() < deadline, "blockx top did not exit after q"
        time.sleep(0.05)
    return rc.read_text().strip()


RATE = re.compile(r"tasks/s: ([\d.]+) submitted, ([\d.]+) finished.*\n.*calls/s: ([\d.]+) finished")


def _rates_moving(text: str) -> bool:
    m = RATE.search(text)
    return bool(m) and float(m.group(2)) > 0 and float(m.group(3)) > 0


def test_top_shows_executors_and_rates_and_quits_on_q(start_worker, tmp_path):
    w = start_worker(executors=2)
    tmux, rc = _top(w, tmp_path, "big", 120, 30)
    stop = threading.Event()

    def load():
        n = 0
        while not stop.is_set():
            n += 1
            w.submit_calls(f"top-{n}", [("sleep_ms", [20 + n % 7]), ("add", [n, 1]), ("square", [n])])
            time.sleep(0.02)

    loader = threading.Thread(target=load, daemon=True)
    try:
        screen = tmux.wait_screen(lambda t: t.count("HEALTHY") == 2, what="two HEALTHY executors")
        assert "exec-0" in screen and "exec-1" in screen and "ready" in screen
        assert re.search(r"slots \d+ running, \d+ reserved, \d+ free of \d+", screen)
        loader.start()
        screen = tmux.wait_screen(_rates_moving, what="task and call rates above zero")
        for line in screen.splitlines():
            if line.startswith("exec-"):
                cols = line.split()
                assert cols[1] == "HEALTHY" and int(cols[2]) > 0, line      # state, pid
        keep = os.environ.get("BLOCKX_TOP_CAPTURE")
        if keep:
            pathlib.Path(keep).write_text(screen)
        stop.set()
        loader.join(10)
        tmux.keys("q")
        assert _wait_rc(rc) == "0"
    finally:
        stop.set()
        tmux.kill()


def test_top_fits_a_plain_80x24_terminal_and_quits_on_q(start_worker, tmp_path):
    w = start_worker(executors=3)
    tmux, rc = _top(w, tmp_path, "small", 80, 24)
    try:
        screen = tmux.wait_screen(lambda t: t.count("HEALTHY") == 3 and "calls/s: 0.0" in t,
                                  what="three HEALTHY executors and measured rates")
        lines = screen.splitlines()
        assert any(line.startswith("tasks/s: ") for line in lines)
        assert any(line.startswith("calls/s: ") for line in lines)        # not wrapped
        assert any(line.startswith("q quit") for line in lines)
        assert all(len(line) <= 80 for line in lines)
        tmux.keys("q")
        assert _wait_rc(rc) == "0"
    finally:
        tmux.kill()


def test_top_without_a_terminal_stops_after_its_iterations(start_worker):
    # --iterations ends a single-worker top as it ends the fleet view: a script or a
    # pipe has no q to press, and without it top never returned.
    w = start_worker(executors=1)
    r = subprocess.run([BLOCKX, "top", "--worker", f"127.0.0.1:{w.port}", "--interval", "0.2",
                        "--iterations", "3"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "exec-0" in r.stdout


def test_top_into_a_pipe_prints_every_frame(start_worker):
    # `blockx top --iterations 3 | cat` printed one frame (rich Live draws the last one
    # when it stops, off a terminal); each refresh is a frame of its own.
    w = start_worker(executors=1)
    r = subprocess.run(f"{BLOCKX} top --worker 127.0.0.1:{w.port} --interval 0.2 --iterations 3 | cat",
                       shell=True, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sum(line.startswith("tasks/s: ") for line in r.stdout.splitlines()) == 3, r.stdout
    assert r.stdout.count("refresh 0.2s") == 3 and "q quit" not in r.stdout    # no keys read from a pipe
    assert "calls/s: 0.0 finished" in r.stdout          # the 2nd and 3rd frames have rates
    assert "exec-0" in r.stdout


def test_top_into_a_pipe_flushes_each_frame_as_it_comes(start_worker):
    w = start_worker(executors=1)
    p = subprocess.Popen([BLOCKX, "top", "--worker", f"127.0.0.1:{w.port}", "--interval", "0.2"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2:                     # top runs on (no --iterations): frames arrive while it does
            assert time.monotonic() < deadline, "no second frame within 30 s"
            line = p.stdout.readline()
            assert line, p.stderr.read()
            seen += line.startswith("tasks/s: ")
        assert p.poll() is None
    finally:
        p.terminate()
        p.wait(10)
