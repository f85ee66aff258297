"""blockx.tenant_view: a tenant's copy of a failure message has no server path and
no server-only part, and still says what went wrong."""
import pytest

from blockx.plugins.function_code.view import FunctionView, Snapshot
from blockx.tenant_view import SERVER_PATH, server_only, tenant_message


class _Source:
    where = "functions dir '/srv/blockx/functions'"


def test_function_not_found_keeps_the_function_and_drops_the_directory_and_the_list():
    view = FunctionView(_Source(), Snapshot(3, {"add": "d1", "secret_report": "d2"}))
    with pytest.raises(LookupError) as ei:
        view.resolve("nope")
    full = str(ei.value)
    assert "/srv/blockx/functions" in full and "known: add, secret_report" in full      # the admin's, the log's
    seen = tenant_message(full)
    assert seen.startswith("function 'nope' not found in code epoch 3")
    assert "/srv" not in seen and "secret_report" not in seen and "known" not in seen
    assert "admin identity" in seen


@pytest.mark.parametrize("text, hidden", [
    ('IO Error: Cannot open file "/var/lib/blockx/state/local.duckdb": Permission denied', "/var/lib/blockx"),
    ("data source 'local' (duckdb:///var/lib/blockx/local.duckdb) failed", "/var/lib/blockx"),
    ("cannot read /srv/blockx/functions/add.py: gone", "/srv/blockx"),
    ("connect to unix:///run/blockx/worker.sock refused", "/run/blockx"),
    ('File "/opt/blockx/.venv/lib/python3.12/site-packages/duckdb/x.py", line 3', "/opt/blockx"),
    ("bad" + server_only("STATE_DIR '/home/w/.local/state/blockx'; known: a, b]") + ".", "known"),
])
def test_server_paths_and_server_only_parts_are_hidden(text, hidden):
    seen = tenant_message(text)
    assert hidden not in seen
    assert SERVER_PATH in seen or "admin identity" in seen


@pytest.mark.parametrize("text", [
    "ValueError: sum_squares needs a non-negative integer, got -1",
    "HTTP 404 from https://rpc.example/v1/eth/mainnet",
    "ratio 3/4 of calls failed", "",
])
def test_a_message_without_server_detail_is_unchanged(text):
    assert tenant_message(text) == text


def test_a_marked_part_inside_json_ends_at_its_own_bracket():
    import json
    doc = {"a": [{"failureMessage": "x" + server_only("functions dir '/srv/f'; known: a, b")}], "b": "[c]"}
    text = tenant_message(json.dumps(doc))
    assert json.loads(text)["b"] == "[c]" and "known" not in text and "/srv" not in text
