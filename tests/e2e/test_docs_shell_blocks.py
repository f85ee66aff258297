"""Every ```sh / ```bash block of README.md and docs/*.md runs, as written,
against a real worker, so a stale command fails here.

Each page runs in a network namespace of its own (made with `unshare --net`,
loopback up), so the docs' own addresses (the Worker on 127.0.0.1:8081, its
metrics on 127.0.0.1:9464, etcd on 2379, Redis on 6379) are the real ones and
collide with nothing else on the machine. A block is a bash script run with
`set -e` from the repository root: any command that fails fails the block (a
pipeline is judged by its last command, so `cmd | grep TEXT` checks cmd's
output, that of a command meant to fail included). Every worker it reaches
accepts the harness's admin token, which the block finds in BLOCKX_TOKEN, as a
reader's shell would hold it.

The block's info string says how it runs:

    ```sh                 against the worker of its section: the last `sh serve`
                          block's above it, else a `dev` worker the test starts
                          (tests/support/worker.py, the shipped example functions)
    ```sh serve           its last command serves until stopped (`make serve`):
                          the test runs it in the background, waits for its
                          worker_ready, runs the section's next blocks against it,
                          and stops it with SIGTERM at the section's end
    ```sh self-contained  starts (with `&`) and uses its own servers: no worker
                          of the test's runs for it or for the rest of its
                          section
    ```sh run-by PATH     a test of its own runs it (PATH, which must exist and
                          name the page)
    ```sh no-run: REASON  cannot run in a test (the test suite itself, a package
                          from the network, podman against a registry, ...)

A section ends at the next `## ` heading; what its blocks left running in the
background (`cmd &`) runs until then, and is stopped with SIGTERM. Blocks that
are not run here are counted and listed by
test_the_blocks_not_run_here_are_few_and_say_why."""
from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from tests.support import auth
from tests.support.worker import WorkerProcess

pytestmark = pytest.mark.e2e
ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGES = ["README.md"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"```(\S*)[ \t]*([^\n]*)\n")
KINDS = ("run", "serve", "self-contained", "run-by", "no-run")
NOT_RUN_MAX = 12            # no-run blocks in all the docs: keep the list short
BLOCK_TIMEOUT_S = 180
SERVE_TIMEOUT_S = 180       # `make serve` may compile first


@dataclasses.dataclass
class Block:
    page: str
    line: int
    section: str
    kind: str
    note: str               # the reason of a no-run block, the test of a run-by one
    text: str

    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse(page: str, text: str) -> list[Block]:
    """The sh / bash blocks of one page, with their section and kind."""
    out: list[Block] = []
    section = ""
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        m = FENCE.fullmatch(line) if line.startswith("```") else None
        if m is None:
            i += 1
            continue
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1
        lang, info = m.group(1), m.group(2).strip()
        if lang not in ("sh", "bash"):
            continue
        kind, _, note = info.partition(" ")
        if kind in ("no-run:", "no-run"):
            kind, note = "no-run", info.partition(":")[2].strip()
        kind = kind or "run"
        out.append(Block(page, start + 1, section, kind, note.strip(), "".join(body)))
    return out


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in parse(page, (ROOT / page).read_text())]


# ---- the parts the blocks run in --------------------------------------------------------

class Namespace:
    """A network namespace with loopback up, held open by a sleeping process."""

    def __init__(self) -> None:
        self.holder = subprocess.Popen(["unshare", "--net", "sh", "-c", "ip link set lo up && echo up && exec sleep 86400"],
                                       stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout is not None and self.holder.stdout.readline().strip() == "up", \
            "unshare --net failed (the docs' blocks run as root in a network namespace of their own)"
        self.enter = ["nsenter", f"--net=/proc/{self.holder.pid}/ns/net"]

    def close(self) -> None:
        self.holder.kill()
        self.holder.wait(10)


class Env:
    """The environment of every block and worker of one page."""

    def __init__(self) -> None:
        self.tmp = tempfile.mkdtemp(prefix="blockx-docs-")
        tokens = auth.write_tokens(self.tmp, {"admin": auth.HARNESS_TOKEN})
        drop = ("WORKER_CONFIG", "BLOCKX_ADDR", "BLOCKX_ETCD", "BLOCKX_PROFILE", "WORKER_LISTEN", "METRICS_LISTEN")
        self.vars = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("PYTEST")}
        self.vars.update({
            "BLOCKX_TOKEN": auth.HARNESS_TOKEN,
            "WORKER_AUTH_TOKENS_FILE": tokens,          # a block that sets its own wins
            "XDG_STATE_HOME": os.path.join(self.tmp, "state"),     # the workers' STATE_DIR
            "PYTHONUNBUFFERED": "1",
        })

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def _stop_group(proc: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM to the block's process group (the worker drains), then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                proc.poll()
                return
            proc.poll()
            time.sleep(0.1)


def _tail(path: str, n: int = 40) -> str:
    try:
        return "".join(open(path, errors="replace").readlines()[-n:])
    except OSError:
        return ""


class ServeBlock:
    """A `sh serve` block running in the background until its section ends."""

    def __init__(self, block: Block, ns: Namespace, env: Env) -> None:
        self.block = block
        self.log = os.path.join(env.tmp, f"serve-{block.line}.log")
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen([*ns.enter, "bash", "--noprofile", "--norc", "-e", "-c",
                                          block.text], cwd=ROOT, env=env.vars, stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + SERVE_TIMEOUT_S
        while '"worker_ready"' not in open(self.log, errors="replace").read():
            if self.proc.poll() is not None:
                raise AssertionError(f"{block.where()}: the serve block exited ({self.proc.returncode}) "
                                     f"before its worker was ready:\n{block.text}\n{_tail(self.log)}")
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"{block.where()}: no worker_ready within {SERVE_TIMEOUT_S}s:\n"
                                     f"{block.text}\n{_tail(self.log)}")
            time.sleep(0.2)

    def stop(self) -> None:
        _stop_group(self.proc)
        text = open(self.log, errors="replace").read()
        assert '"drain_finished"' in text, f"{self.block.where()}: the worker did not drain on SIGTERM:\n{_tail(self.log)}"


class DevWorker:
    """The `dev` worker of the blocks that start none, on the docs' own addresses."""

    def __init__(self, ns: Namespace, env: Env) -> None:
        self.w = WorkerProcess({**env.vars, "WORKER_LISTEN": "127.0.0.1:8081", "METRICS_LISTEN": "127.0.0.1:9464"},
                               profile="dev", executors=2)
        self.w.serve_command = [*ns.enter, sys.executable, "-m", "blockx", "serve"]
        self.w.start(ready=False)
        self.w.wait_event("worker_ready", 60)

    def stop(self) -> None:
        assert self.w.stop() == 0, "\n".join(self.w.lines[-40:])


def run_block(block: Block, ns: Namespace, env: Env) -> subprocess.Popen:
    """Run one block to its end; returns its process group's leader, whose
    group (what the block left running with `&`) lives until the section ends."""
    log = os.path.join(env.tmp, f"block-{block.line}.log")
    with open(log, "w") as out:
        proc = subprocess.Popen([*ns.enter, "bash", "--noprofile", "--norc", "-e", "-c", block.text],
                                cwd=ROOT, env=env.vars, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        rc = proc.wait(BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _stop_group(proc, grace=10.0)
        rc = None
    if rc != 0:
        _stop_group(proc, grace=30.0)
    assert rc == 0, (f"{block.where()} ({block.section}): the block "
                     f"{'timed out' if rc is None else f'exited {rc}'}:\n{block.text}\n--- output:\n{_tail(log, 60)}")
    return proc


class Page:
    """The runnable blocks of one page, run section by section in a namespace of
    their own: the page's dev worker, the current section's serve worker, and the
    process groups its blocks left running."""

    def __init__(self, page: str) -> None:
        self.blocks = [b for b in parse(page, (ROOT / page).read_text()) if b.kind in ("run", "serve", "self-contained")]
        self.ns: Namespace | None = None
        self.env: Env | None = None
        self.dev: DevWorker | None = None
        self.serve: ServeBlock | None = None
        self.own = False            # a self-contained block of this section brought its own servers
        self.groups: list[subprocess.Popen] = []

    def run(self) -> int:
        if not self.blocks:
            return 0
        self.ns, self.env = Namespace(), Env()
        try:
            section = None
            for b in self.blocks:
                if b.section != section:
                    self.end_section()
                    section = b.section
                self.run_block(b)
            self.end_section()
            self.stop_dev()
        finally:
            self.close()
        return len(self.blocks)

    def run_block(self, b: Block) -> None:
        assert self.ns is not None and self.env is not None
        if b.kind in ("serve", "self-contained"):
            self.stop_dev()
            self.stop_serve()
        if b.kind == "serve":
            self.serve = ServeBlock(b, self.ns, self.env)
            return
        if b.kind == "self-contained":
            self.own = True
        elif self.serve is None and not self.own and self.dev is None:
            self.dev = DevWorker(self.ns, self.env)
        self.groups.append(run_block(b, self.ns, self.env))

    def end_section(self) -> None:
        groups, self.groups, self.own = self.groups, [], False
        for g in groups:
            _stop_group(g, grace=30.0)
        self.stop_serve()

    def stop_serve(self) -> None:
        serve, self.serve = self.serve, None
        if serve is not None:
            serve.stop()

    def stop_dev(self) -> None:
        dev, self.dev = self.dev, None
        if dev is not None:
            dev.stop()

    def close(self) -> None:
        """After a failure: stop whatever still runs, then the namespace."""
        for g in self.groups:
            _stop_group(g, grace=10.0)
        for part in (self.serve, self.dev):
            if part is not None:
                try:
                    part.stop()
                except AssertionError:
                    pass
        self.serve = self.dev = None
        if self.ns is not None:
            self.ns.close()
        if self.env is not None:
            self.env.close()


# ---- the tests --------------------------------------------------------------------------

def test_every_block_has_a_kind_this_test_knows():
    bad = [f"{b.where()}: ```{b.kind} {b.note}" for b in all_blocks() if b.kind not in KINDS]
    assert not bad, f"unknown info strings (one of {KINDS}):\n" + "\n".join(bad)


def test_the_info_strings_parse():
    text = ("## A\n```sh\necho 1\n```\n```sh serve\nmake serve\n```\n## B\n"
            "```bash no-run: needs a cluster\nkubectl apply\n```\n```sh run-by tests/x.py\nx\n```\n"
            "```python\nprint(1)\n```\n```sh self-contained\ny &\n```\n")
    got = [(b.section, b.kind, b.note, b.text, b.line) for b in parse("p.md", text)]
    assert got == [("A", "run", "", "echo 1\n", 2), ("A", "serve", "", "make serve\n", 5),
                   ("B", "no-run", "needs a cluster", "kubectl apply\n", 9),
                   ("B", "run-by", "tests/x.py", "x\n", 12), ("B", "self-contained", "", "y &\n", 18)]


def test_the_blocks_not_run_here_are_few_and_say_why():
    no_run = [b for b in all_blocks() if b.kind == "no-run"]
    run_by = [b for b in all_blocks() if b.kind == "run-by"]
    print(f"\n{len(no_run)} block(s) not run (no-run):")
    for b in no_run:
        print(f"  {b.where():32} {b.note}")
    print(f"{len(run_by)} block(s) run by a test of their own (run-by):")
    for b in run_by:
        print(f"  {b.where():32} {b.note}")
    assert all(b.note for b in no_run), [b.where() for b in no_run if not b.note]
    assert len(no_run) <= NOT_RUN_MAX, f"{len(no_run)} no-run blocks: make some of them run"
    for b in run_by:
        test = ROOT / b.note
        assert test.is_file() and b.page in test.read_text(), f"{b.where()}: {b.note} does not run {b.page}'s block"


@pytest.mark.parametrize("page", PAGES)
def test_the_shell_blocks_of_the_page_run(page):
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.fail("the docs' shell blocks run as root in network namespaces (unshare, from util-linux)")
    Page(page).run()
