"""`blockx submit --calls FN:ARGS`: the grammar (blockx.cli.call_grammar) and how a
call outside it ends the command: exit 2, the column named with a caret under
it, and nothing sent (a real listening socket sees no connection)."""
import json
import socket

import pytest

from blockx import cli


@pytest.mark.parametrize("text,expected", [
    ("add:1,2", {"functionId": "add", "args": [1, 2]}),
    ("add", {"functionId": "add", "args": []}),
    ("add:", {"functionId": "add", "args": []}),
    ("add:  ", {"functionId": "add", "args": []}),
    ("add:[1,2]", {"functionId": "add", "args": [1, 2]}),          # one JSON array: the argument list
    ("echo:[[1,2]]", {"functionId": "echo", "args": [[1, 2]]}),     # one list argument, nested
    ("echo:[1,2],3", {"functionId": "echo", "args": [[1, 2], 3]}),
    ('echo:{"k":1}', {"functionId": "echo", "args": [{"k": 1}]}),
    ('echo:"a,b",[1,2]', {"functionId": "echo", "args": ["a,b", [1, 2]]}),
    ('echo: "hi" , null ,true', {"functionId": "echo", "args": ["hi", None, True]}),
    ("sum_squares:10", {"functionId": "sum_squares", "args": [10]}),
    ("my.fn-2:1.5e3", {"functionId": "my.fn-2", "args": [1500.0]}),
    ("f" * 128 + ":1", {"functionId": "f" * 128, "args": [1]}),
])
def test_calls_in_the_grammar(text, expected):
    assert cli.parse_call(text) == expected


@pytest.mark.parametrize("text,column,words", [
    ("add 1 2", 4, "a function id has no spaces"),                  # would have been a function named 'add 1 2'
    ("echo:1,,2", 8, "a value is missing between two commas"),      # would have been [1, "", 2]
    ("echo:[1,2", 10, "the arguments end too soon"),                # would have been ["[1", 2]
    ("", 1, "expected a function id"),
    (":1,2", 1, "the function id is missing"),
    (" add:1", 1, "starts with a letter or a digit"),
    ("_add:1", 1, "starts with a letter or a digit"),
    ("add :1", 4, "no spaces"),
    ("add=1", 4, "'=' cannot be in a function id"),
    ("add/x:1", 4, "'/' cannot be in a function id"),
    ("add.py:1", 4, "names no .py file: add"),
    ("f" * 129, 129, "at most 128 characters"),
    ("add:1,", 7, "after the last ','"),
    ("add:,1", 5, "between two commas"),
    ("add:1 2", 7, "expected ',' between two values"),
    ("echo:hello", 6, "a string is written in double quotes, e.g. --calls 'echo:\"hello\"'"),
    ("echo:[1,hello]", 9, "hello is not a JSON value"),
    ('echo:"open', 6, "unterminated string"),
    ("echo:NaN", 6, "NaN is not JSON"),
    ("add:(1,2)", 5, "expecting value"),
])
def test_calls_outside_the_grammar_name_their_column(text, column, words):
    with pytest.raises(cli.UsageError) as ei:
        cli.parse_call(text)
    err = ei.value
    assert err.exit_code == cli.EXIT_USAGE
    msg = str(err)
    head, echo, caret = msg.split("\n")
    assert head.startswith("--calls ") and f": column {column}: " in head and words in head, msg
    assert echo == "  " + text
    assert caret == "  " + " " * (column - 1) + "^"


def test_a_control_character_is_echoed_escaped_and_the_caret_still_points_at_it():
    msg = str(pytest.raises(cli.UsageError, cli.parse_call, "ad\x1bd:1").value)
    _, echo, caret = msg.split("\n")
    assert "\x1b" not in msg and echo == "  ad\\x1bd:1"
    assert caret.index("^") == echo.index("\\")


@pytest.fixture
def listener():
    """A real listening socket: a connection to it means something was sent."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    s.setblocking(False)
    yield s, "127.0.0.1:%d" % s.getsockname()[1]
    s.close()


def _connections(sock) -> int:
    n = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


@pytest.mark.parametrize("calls", ["add 1 2", "echo:1,,2", "echo:[1,2", "", "echo:hello"])
def test_a_malformed_call_exits_2_and_sends_nothing(calls, listener, capsys):
    sock, addr = listener
    with pytest.raises(SystemExit) as ei:
        cli.main(["submit", "--addr", addr, "--calls", "add:1,2", "--calls", calls])
    assert ei.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "error: argument --calls: " in err and ": column " in err and "^" in err
    assert _connections(sock) == 0


def test_the_grammar_is_in_submit_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["submit", "--help"])
    out = capsys.readouterr().out
    for words in ("--calls FN:ARGS", "JSON values separated by commas, or one JSON array",
                  "exits 2, naming its column", "echo:[[1,2]]"):
        assert words in " ".join(out.split()), words


def test_the_calls_of_a_task_are_the_parsed_calls():
    ns = cli.build_parser().parse_args(["submit", "--calls", "add:[1,2]", "--calls", 'echo:"x"'])
    task = cli.task_from_args(ns)
    assert json.loads(task.function_call.payload) == {"calls": [{"functionId": "add", "args": [1, 2]},
                                                                {"functionId": "echo", "args": ["x"]}]}
