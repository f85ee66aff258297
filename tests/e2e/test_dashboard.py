"""`blockx dashboard` in a real headless Chromium (Debian's chromium and
chromium-driver, driven by Selenium) against two real Workers with token auth.

The workers accept three tokens: admin (the harness's), alice and bob. The
dashboard runs as its own process (`python -m blockx dashboard --workers A,B`).
The browser logs in, sees both workers with their counts, watches alice's task's
progress move, opens a finished task's timeline, cancels a task and sees it end
CANCELLED; bob cannot see alice's tasks; a POST without the session's CSRF token
(or from another Origin) is refused; the cookie is HttpOnly and SameSite=Strict.
Every browser is checked for requests that left loopback (its CDP network log)
and for console errors. Screenshots go to $BLOCKX_DASHBOARD_SHOTS or a temporary
directory the test prints."""
from __future__ import annotations

import json
import os
import pathlib
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from urllib.parse import quote, urlsplit

import pytest

from blockx.worker.v1 import worker_pb2 as pb
from tests.support import auth
from tests.support.dashboard import http, submit
from tests.support.etcd import EtcdServer
from tests.support.fleet import start_workers

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ALICE = "alice-" + secrets.token_urlsafe(18)
BOB = "bob-" + secrets.token_urlsafe(18)
SHOTS = pathlib.Path(os.environ.get("BLOCKX_DASHBOARD_SHOTS") or tempfile.mkdtemp(prefix="blockx-dashboard-shots-"))

if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    pytest.skip("needs Debian's chromium and chromium-driver (`make chromium` installs them)", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")


# ---- the fleet and the dashboard --------------------------------------------------------


@pytest.fixture(scope="module")
def etcd():
    with EtcdServer() as server:
        yield server


@pytest.fixture(scope="module")
def fleet(etcd, tmp_path_factory):
    """Two workers registered in a real etcd, accepting the admin, alice and bob tokens."""
    from tests.e2e.conftest import make_functions_dir

    fdir = make_functions_dir(tmp_path_factory.mktemp("fn"))
    tokens = auth.write_tokens(tmp_path_factory.mktemp("tokens"), {"admin": auth.HARNESS_TOKEN, "alice": ALICE,
                                                                    "bob": BOB})
    workers = start_workers(etcd, 2, fdir, {"TASK_SLOTS": "8", "RESULT_RETENTION_MS": "120000",
                                            "CALL_DEADLINE_MS": "120000", "WORKER_AUTH_TOKENS_FILE": tokens,
                                            "EXECUTOR_COUNT": "2"}, executors=2)
    try:
        yield workers
    finally:
        for w in workers:
            w.stop()


class DashboardProcess:
    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "blockx", "dashboard", "--listen", "127.0.0.1:0", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if k != "BLOCKX_TOKEN"})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()          # bounded: the process exits on any start-up error
        if "serving" not in line:
            err = self.proc.stderr.read().decode() if self.proc.stderr else ""
            raise AssertionError(f"the dashboard did not start: {line!r} {err}")
        self.url = line.split("serving ", 1)[1].strip()

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture(scope="module")
def dashboard(etcd, fleet):
    d = DashboardProcess("--etcd", etcd.endpoint)
    yield d
    d.stop()


# ---- the browser ---------------------------------------------------------------------------


def new_browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"       # Selenium Manager never downloads a browser or a driver
    opts = Options()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="blockx-chromium-")
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1400,900", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    driver._blockx_profile = profile
    return driver


def close_browser(driver) -> None:
    try:
        driver.quit()
    finally:
        shutil.rmtree(driver._blockx_profile, ignore_errors=True)


def assert_clean(driver) -> None:
    """No request left loopback, and the console holds no error."""
    urls = []
    for entry in driver.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    urls += driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert urls, "the network log recorded no request at all"
    outside = [u for u in urls if urlsplit(u).scheme in ("http", "https", "ws", "wss")
               and urlsplit(u).hostname not in ("127.0.0.1", "localhost")]
    assert not outside, f"requests left loopback: {outside}"
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not severe, f"console errors: {severe}"


def wait_for(driver, predicate, what: str, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate(driver)
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - the page is still drawing; try again
            last = exc
        time.sleep(0.1)
    shot(driver, "timeout-" + re.sub(r"[^a-z0-9]+", "-", what.lower())[:40])
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def shot(driver, name: str) -> pathlib.Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


def login(driver, url: str, token: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(url)
    box = wait_for(driver, lambda d: d.find_element(By.ID, "login-token"), "the login form")
    box.send_keys(token)
    driver.find_element(By.ID, "login-submit").click()
    wait_for(driver, lambda d: d.find_element(By.ID, "who").text.strip(), "the identity in the header")


def fleet_rows(driver) -> dict[str, dict[str, str]]:
    """The fleet table as the page shows it now, read in one go (the rows are redrawn every second)."""
    return driver.execute_script("""
        const out = {};
        for (const tr of document.querySelectorAll('#fleet-table tbody tr')) {
          const row = {state: tr.dataset.state};
          for (const td of tr.querySelectorAll('[data-col]')) row[td.dataset.col] = td.textContent.trim();
          out[tr.dataset.addr] = row;
        }
        return out;""")


def text_of(driver, el_id: str) -> str:
    from selenium.webdriver.common.by import By
    return driver.find_element(By.ID, el_id).text


# ---- tasks, submitted as an identity -----------------------------------------------------


def cookie_of(driver) -> dict:
    (c,) = [c for c in driver.get_cookies() if c["name"] == "bx_session"]
    return c


# ---- the tests -----------------------------------------------------------------------------


def test_fleet_page_shows_both_workers_with_their_counts(fleet, dashboard):
    from selenium.webdriver.common.by import By

    d = new_browser()
    try:
        login(d, dashboard.url, auth.HARNESS_TOKEN)
        assert text_of(d, "who") == "admin"
        rows = wait_for(d, lambda d: (r := fleet_rows(d)) and len(r) == 2
                        and all(x["state"] == "ready" for x in r.values()) and r, "two ready workers")
        assert sorted(rows) == sorted(f"127.0.0.1:{w.port}" for w in fleet)
        for r in rows.values():
            assert (r["slots"], r["executors"], r["auth"], r["tls"]) == ("0/8", "2/2", "token", "off"), r
        assert text_of(d, "total-slots") == "0 / 16"
        assert text_of(d, "total-executors") == "4 / 4"
        # live: the server-sent events keep coming, at least once a second
        first = int(d.find_element(By.ID, "fleet-updated").get_attribute("data-updates"))
        t0 = time.monotonic()
        wait_for(d, lambda d: int(d.find_element(By.ID, "fleet-updated").get_attribute("data-updates")) >= first + 3,
                 "three more fleet updates", timeout=20)
        print(f"3 fleet updates in {time.monotonic() - t0:.2f}s")
        # a task running on a worker shows in its row (slots used, phase)
        submit(fleet[0], auth.HARNESS_TOKEN, "fleet-busy-" + secrets.token_hex(4), [("sleepy", [3, i]) for i in range(2)])
        a = f"127.0.0.1:{fleet[0].port}"
        busy = wait_for(d, lambda d: (r := fleet_rows(d)[a])["slots"] == "1/8" and r, "the busy worker's slot in use")
        assert "Calls 1" in busy["phases"], busy
        shot(d, "fleet")
        c = cookie_of(d)
        assert c["httpOnly"] is True and c["sameSite"] == "Strict" and c["secure"] is False   # plain http here
        assert_clean(d)
    finally:
        close_browser(d)


def test_running_task_progress_moves_then_its_timeline(fleet, dashboard):
    from selenium.webdriver.common.by import By

    w = fleet[1]
    tid = "progress-" + secrets.token_hex(4)
    d = new_browser()
    try:
        login(d, dashboard.url, ALICE)
        submit(w, ALICE, tid, [("sleepy", [0.2, i]) for i in range(40)])      # about 4 s on 2 executors
        assert text_of(d, "who").startswith("tenant ")
        d.get(f"{dashboard.url}#/task?worker=127.0.0.1:{w.port}&id={quote(tid)}")
        seen: set[int] = set()

        def moved(d):
            done = d.find_element(By.ID, "task-progress").get_attribute("data-done")
            if done is not None:
                seen.add(int(done))
            return len({n for n in seen if 0 < n < 40}) >= 2
        wait_for(d, moved, "the progress to move twice below 40/40", timeout=40)
        assert "/40 calls done" in text_of(d, "task-progress-text")
        assert text_of(d, "task-phase").startswith("CALLS")
        shot(d, "task-running")
        wait_for(d, lambda d: d.execute_script("return document.body.dataset.taskState") == "SUCCEEDED",
                 "the task to succeed", timeout=60)
        wait_for(d, lambda d: d.execute_script("return document.body.dataset.timeline") == "complete",
                 "the finished task's timeline")
        lanes = [li.text for li in d.find_elements(By.CSS_SELECTOR, "#lanes li")]
        assert any(l.startswith("worker: task phases") for l in lanes), lanes
        assert sum(1 for l in lanes if l.startswith("exec")) >= 2, lanes           # calls per executor lane
        assert int(d.find_element(By.ID, "timeline-canvas").get_attribute("data-spans")) >= 40
        assert text_of(d, "task-progress-text").startswith("40/40")
        assert "outputs 1 to 40 of 40" in text_of(d, "outputs-range")
        assert text_of(d, "task-failure") == "none" and text_of(d, "task-phase") == "TERMINAL"
        shot(d, "task-timeline")
        # the Perfetto file behind the download link is the worker's trace
        href = d.find_element(By.ID, "trace-download").get_attribute("href")
        status, headers, body = http(href, cookie=f"bx_session={cookie_of(d)['value']}")
        assert status == 200 and "attachment" in headers["Content-Disposition"]
        assert any(e.get("ph") == "X" for e in json.loads(body)["traceEvents"])
        assert_clean(d)
    finally:
        close_browser(d)


def test_cancel_a_task_from_its_page(fleet, dashboard):
    from selenium.webdriver.common.by import By

    w = fleet[0]
    tid = "cancel-me-" + secrets.token_hex(4)
    submit(w, ALICE, tid, [("sleep_ms", [60_000 + i]) for i in range(4)])   # cancellable waits (sdk.sleep)
    d = new_browser()
    try:
        login(d, dashboard.url, ALICE)
        d.get(f"{dashboard.url}#/task?worker=127.0.0.1:{w.port}&id={quote(tid)}")
        btn = wait_for(d, lambda d: (b := d.find_element(By.ID, "cancel-btn")).is_displayed() and b,
                       "the cancel button")
        wait_for(d, lambda d: d.execute_script("return document.body.dataset.taskState") == "RUNNING", "RUNNING")
        btn.click()
        wait_for(d, lambda d: d.execute_script("return document.body.dataset.taskState") == "FAILED",
                 "the task to end", timeout=30)
        wait_for(d, lambda d: text_of(d, "task-failure").startswith("CANCELLED"), "the CANCELLED failure")
        assert "dashboard" in text_of(d, "task-failure")
        shot(d, "task-cancelled")
        assert w.result(tid).result.failure_code == "CANCELLED"
        assert_clean(d)
    finally:
        close_browser(d)


def test_a_second_identity_cannot_see_the_first_ones_tasks(fleet, dashboard):
    from selenium.webdriver.common.by import By

    w = fleet[1]
    tid = "alice-only-" + secrets.token_hex(4)
    submit(w, ALICE, tid, [("add", [1, 2])])
    w.wait_terminal(tid)
    bob_tid = "bob-own-" + secrets.token_hex(4)
    submit(w, BOB, bob_tid, [("add", [2, 3])])
    w.wait_terminal(bob_tid)
    alice, bob = new_browser(), new_browser()
    try:
        login(alice, dashboard.url, ALICE)
        alice.get(dashboard.url + "#/tasks")
        wait_for(alice, lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-task='{tid}']"), "alice's task listed")
        assert not alice.find_elements(By.CSS_SELECTOR, f"tr[data-task='{bob_tid}']")
        login(bob, dashboard.url, BOB)
        assert text_of(bob, "who") != text_of(alice, "who")
        bob.get(dashboard.url + "#/tasks")
        wait_for(bob, lambda d: d.find_elements(By.CSS_SELECTOR, f"tr[data-task='{bob_tid}']"), "bob's task listed")
        assert not bob.find_elements(By.CSS_SELECTOR, f"tr[data-task='{tid}']")
        # the fleet page of a tenant: the registry's view only, and it says why
        bob.get(dashboard.url + "#/fleet")
        wait_for(bob, lambda d: "admin token" in d.find_element(By.ID, "fleet-note").text, "the tenant's note")
        shot(bob, "tasks-bob")
        # and asking for alice's task by id is refused by the worker, through the dashboard
        cookie = f"bx_session={cookie_of(bob)['value']}"
        for path in ("task", "task/timeline", "task/trace.json"):
            status, _h, body = http(f"{dashboard.url}api/{path}?worker=127.0.0.1:{w.port}&id={tid}", cookie=cookie)
            assert status in (403, 404), (path, status, body)
            assert json.loads(body)["error"].startswith(("NOT_FOUND", "PERMISSION_DENIED")), body
        # admin sees both, and the owner filter picks one identity's
        origin = dashboard.url.rstrip("/")
        status, headers, body = http(dashboard.url + "api/login", method="POST", body={"token": auth.HARNESS_TOKEN},
                                     headers={"Content-Type": "application/json", "Origin": origin})
        assert status == 200, body
        admin = headers["Set-Cookie"].split(";", 1)[0]
        status, _h, body = http(f"{dashboard.url}api/tasks?worker=127.0.0.1:{w.port}&page_size=200", cookie=admin)
        listed = {t["task_id"]: t["owner"] for t in json.loads(body)["tasks"]}
        assert listed[tid] == "alice" and listed[bob_tid] == "bob"
        status, _h, body = http(f"{dashboard.url}api/tasks?owner=bob&page_size=200", cookie=admin)
        assert {t["owner"] for t in json.loads(body)["tasks"]} == {"bob"}
        assert_clean(alice)
        assert_clean(bob)
    finally:
        close_browser(alice)
        close_browser(bob)


def test_posts_need_the_sessions_csrf_token_and_own_origin(fleet, dashboard):
    w = fleet[1]
    tid = "csrf-" + secrets.token_hex(4)
    submit(w, ALICE, tid, [("sleep_ms", [60_000 + i]) for i in range(4)])   # cancellable waits (sdk.sleep)
    d = new_browser()
    try:
        login(d, dashboard.url, ALICE)
        csrf = d.execute_script("return fetch('/api/me').then(r => r.json()).then(j => j.csrf)")
        cookie = f"bx_session={cookie_of(d)['value']}"
        assert_clean(d)
    finally:
        close_browser(d)
    url = dashboard.url + "api/task/cancel"
    origin = dashboard.url.rstrip("/")
    body = {"worker": f"127.0.0.1:{w.port}", "task_id": tid}
    json_ct = {"Content-Type": "application/json"}
    refused = [
        ("no CSRF token", {**json_ct, "Origin": origin}),
        ("another session's token", {**json_ct, "Origin": origin, "X-CSRF-Token": "x" * 43}),
        ("a foreign Origin", {**json_ct, "Origin": "http://evil.example", "X-CSRF-Token": csrf}),
        ("no Origin", {**json_ct, "X-CSRF-Token": csrf}),
        ("a form post", {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin,
                         "X-CSRF-Token": csrf}),
    ]
    for what, headers in refused:
        status, _h, answer = http(url, cookie=cookie, method="POST", body=body, headers=headers)
        assert status in (403, 415), (what, status, answer)
        assert w.result(tid).state == pb.TASK_STATE_RUNNING, what
    # a rebinding page's Host gets nothing at all
    status, _h, _b = http(dashboard.url, headers={"Host": "evil.example"})
    assert status == 421
    # the same POST with the token and the page's own Origin is the one that works
    status, _h, answer = http(url, cookie=cookie, method="POST", body=body,
                              headers={**json_ct, "Origin": origin, "X-CSRF-Token": csrf})
    assert status == 200, answer
    assert json.loads(answer)["cancelled"] is True
    assert w.wait_terminal(tid).failure_code == "CANCELLED"


def test_security_headers_of_every_answer(dashboard):
    for path in ("", "static/app.js", "api/me", "api/fleet"):
        status, headers, _body = http(dashboard.url + path)
        assert status in (200, 401), (path, status)
        assert headers["Content-Security-Policy"].startswith("default-src 'self'")
        assert "'unsafe-inline'" not in headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["Referrer-Policy"] == "no-referrer"
    status, _h, body = http(dashboard.url + "api/fleet")
    assert status == 401 and b"log in" in body


def test_a_worker_that_leaves_the_registry_shows_as_gone(etcd, fleet, dashboard, tmp_path):
    from tests.e2e.conftest import make_functions_dir

    (third,) = start_workers(etcd, 1, make_functions_dir(tmp_path), {"TASK_SLOTS": "2"})
    addr = f"127.0.0.1:{third.port}"
    d = new_browser()
    try:
        login(d, dashboard.url, auth.HARNESS_TOKEN)
        wait_for(d, lambda d: fleet_rows(d).get(addr, {}).get("state") == "ready", "the third worker, ready")
        third.stop()                                  # SIGTERM: it drains and deregisters
        wait_for(d, lambda d: fleet_rows(d).get(addr, {}).get("state") == "gone", "the third worker, gone")
        assert all(fleet_rows(d)[f"127.0.0.1:{w.port}"]["state"] == "ready" for w in fleet)
        shot(d, "fleet-gone")
        assert_clean(d)
    finally:
        close_browser(d)
        third.stop()
