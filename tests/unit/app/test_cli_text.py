"""Strings others chose are printed escaped by every human-readable CLI output:
`blockx status` / `top` (executor ids, states, worker address, errors), `blockx
workers` / `functions list` (etcd keys), `blockx trace`'s summary, the progress
bars and the `error:` line. The live commands against real workers and etcd are in
tests/e2e/test_attack_defaults.py and test_top.py."""
import io
import types

import pytest

from blockx.cli import main
from blockx.cli.exit import CLIError
from blockx.cli.fleet import workers_table
from blockx.cli.status_render import render_status
from blockx.cli.text import rich_safe, term_safe
from blockx.cli.top import render_top
from blockx.client.registry import WorkerInfo
from blockx.worker.v1 import worker_pb2 as pb

ESC = "\x1b"
EVIL = f"{ESC}[2J{ESC}]0;owned\x07\r\x9b31m\u202eevil"


def test_term_safe_writes_every_control_character_as_an_escape():
    assert term_safe(EVIL) == "\\x1b[2J\\x1b]0;owned\\x07\\x0d\\x9b31m\\u202eevil"
    assert term_safe("a\tb\nc\x7f") == "a\\x09b\\x0ac\\x7f"
    assert term_safe("line 1\nline 2", keep_newlines=True) == "line 1\nline 2"
    assert term_safe("exec-0 ünïcode 10.0.0.1:8081") == "exec-0 ünïcode 10.0.0.1:8081"
    assert term_safe(42) == "42"
    assert rich_safe("[red]x[/red]\x1b") == "\\[red]x\\[/red]\\x1b"


def _status(executor_id: str, addr: str = "10.0.0.7:8081") -> pb.WorkerStatus:
    return pb.WorkerStatus(
        worker_addr=addr, version="0.1.0", now_ms=2_000, uptime_ms=1_000, ready=True, etcd_state="registered",
        slots=pb.SlotCounts(total=4, free=4),
        executors=[pb.ExecutorStatus(executor_id=executor_id, state="LOST" + ESC + "[8m", healthy=False),
                   pb.ExecutorStatus(executor_id="[bold red]exec-9[/bold red]", state="HEALTHY", healthy=True)])


def _screen(renderable, color=None) -> str:
    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=200, color_system=color, force_terminal=color is not None).print(renderable)
    return buf.getvalue()


@pytest.mark.parametrize("color", [None, "truecolor"])
def test_status_and_top_show_the_workers_strings_escaped(color):
    st = _status(EVIL, addr=f"w{ESC}[2Jx")
    for screen in (_screen(render_status(st), color), _screen(render_top(st, None, error=f"boom{ESC}[2J"), color)):
        assert f"{ESC}[2J" not in screen and f"{ESC}]0" not in screen and "\x07" not in screen
        assert "\\x1b[2J\\x1b]0;owned\\x07" in screen          # the executor id, as sent
        assert "LOST\\x1b[8m" in screen and "w\\x1b[2Jx" in screen
        assert "[bold red]exec-9[/bold red]" in screen      # shown, not taken as markup
    assert "boom\\x1b[2J" in _screen(render_top(st, None, error=f"boom{ESC}[2J"))


def test_workers_table_shows_etcd_keys_escaped():
    out = workers_table([WorkerInfo(f"10.0.0.9:1{ESC}[2J", ready=True)], now_ms=0)
    assert ESC not in out and "10.0.0.9:1\\x1b[2J" in out


def test_the_error_line_escapes_what_it_quotes(monkeypatch, capsys):
    def refuse(ns):
        raise CLIError(f"etcd 127.0.0.1:2379: UNAVAILABLE: {EVIL}\nsecond line")

    import blockx.cli as cli

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(parser, "parse_args", lambda argv: types.SimpleNamespace(func=refuse))
    assert main([]) == 1
    err = capsys.readouterr().err
    assert ESC not in err and "\\x1b[2J" in err and err.endswith("second line\n")


def test_the_trace_summary_escapes_the_task_id(monkeypatch, capsys):
    import contextlib

    import blockx.client

    tr = types.SimpleNamespace(task_id=f"t{ESC}[2J", state="SUCCEEDED" + ESC, complete=True, sampled=False,
                               sample_every=1, events_dropped=0, events_recorded=3, chrome_trace_json=b"{}")
    client = types.SimpleNamespace(trace=lambda task_id, timeout_s: tr)
    monkeypatch.setattr(blockx.client, "connect", lambda *a, **kw: contextlib.nullcontext(client))
    assert main(["trace", "t", "--addr", "127.0.0.1:1"]) == 0
    err = capsys.readouterr().err
    assert ESC not in err and err.startswith("trace of task t\\x1b[2J: 3 events (SUCCEEDED\\x1b, complete)")
