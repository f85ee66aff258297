"""ResultPages.for_caller: a non-admin identity's replies and updates carry the
failure and plugin messages without server paths or server-only parts; the
admin's, the unrestricted caller's and the stored result keep them whole."""
import pytest

from blockx.adapters.grpc import wire
from blockx.adapters.grpc.result_pages import ResultPages
from blockx.core.owners import Caller
from blockx.core.types import PluginResult, TaskResult, TaskSnapshot, TaskState, TaskStatistic
from blockx.tenant_view import server_only

FULL = "function 'nope' not found in code epoch 1" + server_only("functions dir '/srv/fn'; known: add, other")
PLUGIN = 'IO Error: Cannot open file "/var/lib/blockx/local.duckdb"'
ALICE, ADMIN = Caller("alice"), Caller("admin", admin=True)


def failed(outputs=(b"1",)):
    r = TaskResult(TaskState.FAILED, "CALL_FAILED", FULL, False, list(outputs),
                   [PluginResult("tableInserts", False, PLUGIN)], TaskStatistic())
    return TaskSnapshot("t-1", "slot-1", TaskState.FAILED, r)


def leaks(r) -> list[str]:
    text = r.failure_message + " ".join(p.message for p in r.plugin_results)
    return [x for x in ("/srv/fn", "other", "/var/lib/blockx") if x in text]


@pytest.mark.parametrize("kind", ["slot", "submit", "result"])
def test_a_tenant_reply_hides_server_detail_and_the_admin_reply_keeps_it(kind):
    pages, snap = ResultPages(), failed()
    tenant, _ = pages.for_caller(ALICE).reply(snap, kind)
    assert leaks(tenant.result) == [] and tenant.result.failure_message.startswith("function 'nope' not found")
    assert tenant.result.outputs == [b"1"] and tenant.result.failure_code == "CALL_FAILED"
    for who in (ADMIN, None):
        whole, _ = pages.for_caller(who).reply(snap, kind)
        assert leaks(whole.result) == ["/srv/fn", "other", "/var/lib/blockx"]
    assert snap.result.failure_message == FULL and snap.result.plugin_results[0].message == PLUGIN


def test_a_shared_update_stays_whole_for_the_admin_watchers():
    pages, snap = ResultPages(), failed()
    upd = wire.TaskUpdateEncoder(None)(snap)
    tenant = pages.for_caller(ALICE).fit_update(upd, snap)
    assert leaks(tenant.result) == [] and tenant is not upd
    assert leaks(upd.result) == ["/srv/fn", "other", "/var/lib/blockx"]
    assert pages.for_caller(ADMIN).fit_update(upd, snap) is upd


def test_a_result_with_nothing_to_hide_is_the_same_message():
    pages = ResultPages()
    ok = TaskSnapshot("t-2", "s", TaskState.SUCCEEDED, TaskResult(TaskState.SUCCEEDED, outputs=[b"2"]))
    upd = wire.TaskUpdateEncoder(None)(ok)
    assert pages.for_caller(ALICE).fit_update(upd, ok) is upd


def test_a_cut_page_of_a_tenant_result_hides_server_detail_too():
    pages, snap = ResultPages(16 * 1024, 64 * 1024), failed([b"x" * 6000] * 5)
    first, _ = pages.for_caller(ALICE).reply(snap, "result")
    assert first.result.outputs_truncated and leaks(first.result) == []
    nxt, _ = pages.for_caller(ALICE).reply(snap, "result", offset=len(first.result.outputs))
    assert leaks(nxt.result) == []


def test_a_tenant_traceback_hides_server_paths_as_the_message_does():
    tb = ('Traceback (most recent call last):\n  File "<blockx-fn f@1>", line 2, in main\n'
          'OSError: cannot read /var/lib/blockx/local.duckdb' + server_only("functions dir '/srv/fn'"))
    r = TaskResult(TaskState.FAILED, "CALL_FAILED", FULL, False, [], [], TaskStatistic(),
                   failure_call_id="t-1/0", failure_traceback=tb, failure_locals=(("n", "1"),))
    snap = TaskSnapshot("t-1", "slot-1", TaskState.FAILED, r)
    pages = ResultPages()
    tenant, _ = pages.for_caller(ALICE).reply(snap, "result")
    seen = tenant.result.failure_traceback
    assert "<blockx-fn f@1>" in seen and "/var/lib/blockx" not in seen and "/srv/fn" not in seen
    assert [(v.name, v.value) for v in tenant.result.failure_locals] == [("n", "1")]
    upd = pages.for_caller(ALICE).fit_update(wire.TaskUpdateEncoder(None)(snap), snap)
    assert "/var/lib/blockx" not in upd.result.failure_traceback
    whole, _ = pages.for_caller(ADMIN).reply(snap, "result")
    assert "/var/lib/blockx" in whole.result.failure_traceback
