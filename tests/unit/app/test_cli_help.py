"""Every subcommand's --help: a description, examples that the parser accepts,
the exit codes; one spelling per --policy value; completion scripts from shtab."""
import argparse
import io
import shlex
import subprocess

import pytest

from blockx import cli
from blockx.cli.parser import SHELLS, cmd_completion
from blockx.cli.help import EXIT_CODES, examples_of
from blockx.cli.tasks import HEALTH_EXIT_CODES


def _subparsers(parser: argparse.ArgumentParser, path=()):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sp in action.choices.items():
                yield (*path, name), sp
                yield from _subparsers(sp, (*path, name))


def _leaves():
    return [(path, sp) for path, sp in _subparsers(cli.build_parser())]


def test_every_subcommand_has_a_description_examples_and_the_exit_codes():
    leaves = _leaves()
    names = {" ".join(p) for p, _ in leaves}
    assert {"serve", "submit", "watch", "result", "slot", "status", "top", "trace", "workers", "functions",
            "functions push", "functions list", "completion", "cancel", "tasks", "health"} <= names
    for path, sp in leaves:
        assert (sp.description or "").strip(), f"blockx {' '.join(path)} has no description"
        assert examples_of(sp), f"blockx {' '.join(path)} has no example"
        # `blockx health` exits by the worker's health (0 ready, 1 not, 2 no answer): its own codes
        codes = HEALTH_EXIT_CODES if path == ("health",) else EXIT_CODES
        assert codes in sp.format_help(), f"blockx {' '.join(path)} --help lacks the exit codes"
    top = cli.build_parser().format_help()
    assert EXIT_CODES in top and "completion" in top


def test_every_example_is_a_command_line_the_parser_accepts():
    for path, sp in _leaves():
        for example in examples_of(sp):
            words = shlex.split(example)
            for stop in (">", "|"):
                if stop in words:
                    words = words[:words.index(stop)]
            assert words[0] == "blockx", example
            ns = cli.build_parser().parse_args(words[1:])     # SystemExit (2) on a stale example
            assert callable(ns.func), example


def test_policy_has_one_spelling_per_value(capsys):
    p = cli.build_parser()
    assert p.parse_args(["submit", "--policy", "fast-fail"]).policy == "fast-fail"
    with pytest.raises(SystemExit) as exc:
        p.parse_args(["submit", "--policy", "fast_fail"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'fast_fail'" in err and "fast-fail" in err and "continue" in err


def test_version_and_exit_codes_in_help(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    from blockx import __version__
    assert capsys.readouterr().out.strip() == f"blockx {__version__}"


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_scripts_cover_the_subcommands_and_complete_paths(shell, capsys):
    assert cli.main(["completion", shell]) == 0
    script = capsys.readouterr().out
    out = io.StringIO()
    assert cmd_completion(argparse.Namespace(shell=shell), out) == 0 and out.getvalue() == script
    for word in ("serve", "submit", "status", "trace", "functions", "completion", "--policy", "fast-fail"):
        assert word in script, (shell, word)
    if shell == "bash":
        assert "_shtab_compgen_files" in script and "_shtab_compgen_dirs" in script


def test_bash_completes_from_the_script_alone(tmp_path, capsys):
    assert cli.main(["completion", "bash"]) == 0
    (tmp_path / "blockx.bash").write_text(capsys.readouterr().out)
    probe = (f"source {tmp_path / 'blockx.bash'}\n"
             "complete_line() { COMP_WORDS=($1); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE=\"$1\"; "
             "COMP_POINT=${#COMP_LINE}; _shtab_blockx; echo \"${COMPREPLY[*]}\"; }\n"
             "complete_line 'blockx sta'\ncomplete_line 'blockx submit --policy f'\n"
             "complete_line 'blockx functions p'\n")
    out = subprocess.run(["bash", "--norc", "-c", probe], capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"})      # no blockx on PATH: the script alone
    assert out.stdout.splitlines() == ["status", "fast-fail", "push"], out.stderr
