"""The dashboard's first paint and memory: N workers (3) holding M finished tasks
(1,000, kept by resultRetentionMs), `blockx dashboard --workers ...` in its own
process, Debian's headless Chromium logging in as admin and opening the fleet
page, then the tasks page (every worker's first page) and one task's timeline.

It prints, per round: the fleet page's first contentful paint (the browser's
paint timing, from navigation start), the time from navigation to the fleet
table drawn with every worker (the first server-sent event), the tasks page
load, the timeline's fetch and draw, and the dashboard process's RSS (VmRSS and
VmHWM, its peak). And the time from a task's submit to its worker's row showing the slot in use
(a live update). The aims: first paint under 1 s, updates within 1 s, RSS under 100 MB.

    .venv/bin/python bench/dashboard_paint.py [--workers 3] [--tasks 1000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support import auth  # noqa: E402
from tests.support.worker import WorkerProcess  # noqa: E402


def rss_kb(pid: int) -> tuple[int, int]:
    vals = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                vals[k] = int(v.split()[0])
    return vals["VmRSS"], vals["VmHWM"]


async def fill(addrs: list[str], n: int) -> None:
    from blockx.client import WorkerClient

    per = -(-n // len(addrs))

    async def one(addr: str, base: int) -> None:
        async with WorkerClient(addr, token=auth.HARNESS_TOKEN, tls=None) as c:
            async for _ in c.map("add", ([base + i, 1] for i in range(per)), concurrency=64):
                pass
    await asyncio.gather(*(one(a, k * per) for k, a in enumerate(addrs)))


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    opts = Options()
    opts.binary_location = "/usr/bin/chromium"
    profile = tempfile.mkdtemp(prefix="blockx-bench-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,900", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(executable_path="/usr/bin/chromedriver")), profile


def wait(d, script: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = d.execute_script(script)
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out: {script}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--tasks", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--big-task", type=int, default=100_000, metavar="CALLS",
                   help="then one task of this many calls: its page with the timeline (0: skip)")
    ns = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="blockx-bench-dash-")
    tokens = auth.write_tokens(tmp, {"admin": auth.HARNESS_TOKEN})
    workers = [WorkerProcess({"TASK_SLOTS": "64", "RESULT_RETENTION_MS": "600000", "WORKER_AUTH_TOKENS_FILE": tokens},
                             executors=1) for _ in range(ns.workers)]
    dash = None
    try:
        for w in workers:
            w.start()
        addrs = [f"127.0.0.1:{w.port}" for w in workers]
        t0 = time.monotonic()
        if ns.big_task:
            workers[0].submit_calls("big", [("add1", [i]) for i in range(ns.big_task)], rpc_timeout=120)
            workers[0].wait_terminal("big", timeout=300)
            print(f"a task of {ns.big_task} calls finished in {time.monotonic() - t0:.1f}s")
            t0 = time.monotonic()
        asyncio.run(fill(addrs, ns.tasks))
        print(f"{ns.workers} workers, {ns.tasks} tasks submitted and finished in {time.monotonic() - t0:.1f}s")
        dash = subprocess.Popen([sys.executable, "-m", "blockx", "dashboard", "--workers", ",".join(addrs),
                                 "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env={k: v for k, v in os.environ.items() if k != "BLOCKX_TOKEN"})
        assert dash.stdout is not None
        url = dash.stdout.readline().decode().split("serving ", 1)[1].strip()
        print(f"dashboard idle: RSS {rss_kb(dash.pid)[0] / 1024:.1f} MB")
        for r in range(ns.rounds):
            d, profile = browser()
            try:
                d.get(url)
                wait(d, "return document.getElementById('login-token')")
                d.find_element("id", "login-token").send_keys(auth.HARNESS_TOKEN)
                d.find_element("id", "login-submit").click()
                wait(d, "return document.getElementById('who').textContent")
                d.get("about:blank")
                t = time.monotonic()
                d.get(url + "#/fleet")
                n = ns.workers
                wait(d, f"return document.querySelectorAll('#fleet-table tbody tr[data-state=ready]').length == {n}")
                drawn = time.monotonic() - t
                fcp = d.execute_script("const e = performance.getEntriesByName('first-contentful-paint')[0];"
                                       " return e ? e.startTime : null")
                nav_table = d.execute_script("return performance.now()")
                # the lag of a live update: a task starts on worker 0, its row shows the slot in use
                workers[0].submit_calls(f"live-{r}", [("sleep_ms", [3000])], rpc_timeout=30)
                t = time.monotonic()
                wait(d, f"return [...document.querySelectorAll('#fleet-table tbody tr')].some(tr => "
                        f"tr.dataset.addr == '{addrs[0]}' && tr.querySelector('[data-col=slots]').textContent == '1/64')")
                lag = time.monotonic() - t
                t = time.monotonic()
                d.get(url + "#/tasks")
                wait(d, "return document.body.dataset.tasksLoaded")
                tasks_s = time.monotonic() - t
                rows = d.execute_script("return document.querySelectorAll('#tasks-table tbody tr').length")
                first = d.execute_script("const a = document.querySelector('#tasks-table tbody a');"
                                         " return a ? a.getAttribute('href') : null")
                t = time.monotonic()
                d.get(url + first)
                wait(d, "return document.body.dataset.timeline")
                tl_s = time.monotonic() - t
                big = ""
                if ns.big_task:
                    d.get("about:blank")
                    t = time.monotonic()
                    d.get(url + f"#/task?worker={addrs[0]}&id=big")
                    wait(d, "return document.body.dataset.timeline", timeout=60)
                    info = d.execute_script("return document.getElementById('timeline-info').textContent")
                    big = f"; the {ns.big_task}-call task's page with its timeline {(time.monotonic() - t) * 1000:.0f} ms ({info})"
                rss, hwm = rss_kb(dash.pid)
                print(f"round {r + 1}: fleet first contentful paint {fcp:.0f} ms, fleet table with {n} workers "
                      f"{drawn * 1000:.0f} ms (page clock {nav_table:.0f} ms); a task's start seen {lag * 1000:.0f} ms after its "
                      f"submit returned; tasks page ({rows} rows) "
                      f"{tasks_s * 1000:.0f} ms; a task with its timeline {tl_s * 1000:.0f} ms; dashboard RSS "
                      f"{rss / 1024:.1f} MB (peak {hwm / 1024:.1f} MB){big}")
            finally:
                d.quit()
                shutil.rmtree(profile, ignore_errors=True)
    finally:
        if dash is not None:
            dash.terminate()
            dash.wait(10)
        for w in workers:
            w.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
