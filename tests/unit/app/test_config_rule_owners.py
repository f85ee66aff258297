"""A setting's rule sits with its setting's owner; app/config_checks only collects.

Stated mechanically, over the source of blockx/app/config_checks.py:
- from an adapter or a plugin it imports only rules, never a bound, a parser or
  a class to build a rule of its own: names ending in `_RULES` (a table of Rule)
  or in `_problem` / `_problems` (a function that judges values);
- the Rule tables it writes itself name only top-level settings of
  WorkerFullConfig (those only the app wires): a section's rules (dispatcher.,
  ioBackends.sql., writerStream., ...) come from the section's owner;
- none of its own Rules is for a field an owner's `*_RULES` table outside
  blockx/app also rules."""
from __future__ import annotations

import ast
import pathlib
import re
from dataclasses import fields

import pytest

from blockx.app.config import WorkerFullConfig

ROOT = pathlib.Path(__file__).resolve().parents[3]
CHECKS = ROOT / "blockx" / "app" / "config_checks.py"
OWNER_PACKAGES = ("blockx.adapters", "blockx.plugins")
RULE_NAME = re.compile(r"(^[A-Z][A-Z0-9_]*_RULES$)|(_problems?$)")


def foreign_imports(source: str) -> list[str]:
    """`module.name` of every import (top level or inside a function) from an
    adapter or a plugin that is not a rule table or a problem function."""
    bad = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(OWNER_PACKAGES):
            bad += [f"{node.module}.{a.name}" for a in node.names if not RULE_NAME.search(a.name)]
        elif isinstance(node, ast.Import):
            bad += [a.name for a in node.names if a.name.startswith(OWNER_PACKAGES)]
    return bad


def rule_fields(source: str) -> set[str]:
    """The field of every `Rule("field", ...)` written in `source`."""
    return {node.args[0].value for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Rule"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)}


def owner_rule_fields() -> dict[str, str]:
    """field -> module, for every Rule in a module-level `*_RULES` table outside blockx/app."""
    out: dict[str, str] = {}
    for path in sorted((ROOT / "blockx").rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[:2] == ("blockx", "app"):
            continue
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id.endswith("_RULES") for t in targets) and node.value:
                    for name in rule_fields(ast.unparse(node.value)):
                        out.setdefault(name, str(rel))
    return out


def test_config_checks_takes_only_rules_from_adapters_and_plugins():
    bad = foreign_imports(CHECKS.read_text())
    assert not bad, ("declare the rule beside the setting's owner (a *_RULES table or a *_problem(s) "
                     f"function) and import that instead: {bad}")


def test_config_checks_rules_only_top_level_settings():
    top = {f.name for f in fields(WorkerFullConfig)}
    section = sorted(rule_fields(CHECKS.read_text()) - top)
    assert not section, f"rules of a section's settings belong to the section's owner: {section}"


def test_no_setting_is_ruled_by_the_app_and_by_its_owner():
    owners = owner_rule_fields()
    twice = {f: owners[f] for f in rule_fields(CHECKS.read_text()) if f in owners}
    assert not twice, f"ruled in app/config_checks and by its owner: {twice}"


def test_the_owners_tables_are_found():
    owners = owner_rule_fields()
    for field, module in (("trace_max_events_per_task", "blockx/adapters/telemetry/trace_recorder.py"),
                          ("max_result_bytes", "blockx/plugins/io/sql.py"),
                          ("grpc_max_message_bytes", "blockx/adapters/grpc/limits.py"),
                          ("result_page_bytes", "blockx/adapters/grpc/result_pages.py"),
                          ("executor_max_inflight", "blockx/core/dispatch/config.py")):
        assert owners.get(field) == module


@pytest.mark.parametrize("line", [
    "from blockx.adapters.executor.outbox_limits import OUTBOX_DEPTH",
    "from blockx.adapters.telemetry.trace_recorder import MIN_MAX_EVENTS as MIN_TRACE_EVENTS, RETAINED_FLOOR_EVENTS",
    "from blockx.plugins.data.urls import parse_source_url",
    "def f():\n    from blockx.plugins.function_code.redis import RedisCodeKeys, redacted_url",
    "def f():\n    from blockx.adapters.audit import AUDIT_MODES, AuditAllowlist, AuditAllowlistError",
    "import blockx.adapters.auth"])
def test_an_import_of_anything_but_a_rule_is_found(line):
    assert foreign_imports(line + "\n")


@pytest.mark.parametrize("line", [
    "from blockx.adapters.telemetry.trace_recorder import TRACE_RULES",
    "from blockx.adapters.executor.outbox_limits import inflight_problem",
    "def f():\n    from blockx.adapters.audit import audit_problems",
    "from blockx.core.config import CONFIG_RULES, deadline_problem",
    "from blockx.app.addresses import split_host_port"])
def test_a_rule_import_is_not_flagged(line):
    assert foreign_imports(line + "\n") == []


def test_a_section_rule_written_in_the_app_is_found():
    src = 'IO = (Rule("concurrency", 1), Rule("timeout_ms", 0, note="0 = phaseIoTimeoutMs"))\n'
    assert rule_fields(src) - {f.name for f in fields(WorkerFullConfig)} == {"concurrency", "timeout_ms"}


# The rules that moved to their owners and that no other config test words in
# full: each message is the one app/config_checks gave when it held the rule.
MOVED = [
    (dict(grpc_max_message_bytes=1000), "grpcMaxMessageBytes (WORKER_GRPC_MAX_MESSAGE_BYTES) must be between "
                                        "65536 and 2147483647 (grpc takes a 32-bit size) (got 1000)"),
    (dict(grpc_max_concurrent_streams=0),
     "grpcMaxConcurrentStreams (WORKER_GRPC_MAX_CONCURRENT_STREAMS) must be > 0 (got 0)"),
    (dict(grpc_max_concurrent_rpcs=0), "grpcMaxConcurrentRpcs (WORKER_GRPC_MAX_CONCURRENT_RPCS) must be > 0 (got 0)"),
    (dict(grpc_max_connections=0), "grpcMaxConnections (WORKER_GRPC_MAX_CONNECTIONS) must be > 0 (got 0)"),
    (dict(max_task_sessions=0), "maxTaskSessions (MAX_TASK_SESSIONS) must be > 0 (got 0)"),
    (dict(max_watch_streams=0), "maxWatchStreams (MAX_WATCH_STREAMS) must be > 0 (got 0)"),
    (dict(watch_max_pending_updates=0), "watchMaxPendingUpdates (WATCH_MAX_PENDING_UPDATES) must be > 0 (got 0)"),
    (dict(result_page_bytes=1024), "resultPageBytes (RESULT_PAGE_BYTES) must be between 16384 and 2147483647 "
                                   "(got 1024)"),
    (dict(result_page_bytes=64 * 1024 * 1024),
     "resultPageBytes (RESULT_PAGE_BYTES) (67108864) must be at most grpcMaxMessageBytes "
     "(WORKER_GRPC_MAX_MESSAGE_BYTES) (67108864) - 16384 = 67092480: a page of a result must fit one gRPC "
     "message; lower the first or raise the second"),
    (dict(dispatcher__executor_max_inflight=257),
     "dispatcher.executorMaxInflight (257) must not exceed the executor outbox depth (256 frames): it is how many "
     "calls one executor may be sent at once; set it to at most 256 (more executors, executorCount, carry more "
     "calls in flight)"),
    (dict(writer_stream__keep_outputs=-1),
     "writerStream.keepOutputs (WRITER_STREAM_KEEP_OUTPUTS) must be >= 0 (0 keeps none) (got -1)"),
    (dict(writer_stream__buffer_bytes=0), "writerStream.bufferBytes must be > 0 (got 0)"),
    (dict(io_backends__devstub__timeout_ms=-1),
     "ioBackends.devstub.timeoutMs must be >= 0 (0 = phaseIoTimeoutMs) (got -1)"),
    (dict(io_backends__sql__max_result_bytes=16 * 1024 * 1024),
     "ioBackends.sql.maxResultBytes (SQL_IO_MAX_RESULT_BYTES) must be between 1 and 15728640 "
     "(a result travels in one 16 MiB frame) (got 16777216)"),
    (dict(io_backends__rpc__max_batch=0), "ioBackends.rpc.maxBatch must be between 1 and 10000 (got 0)"),
    (dict(data_plane__scan_fetch_rows=0), "dataPlane.scanFetchRows must be between 1 and 1000000 (got 0)"),
    (dict(data_plane__duckdb_memory_limit_mb=-1),
     "dataPlane.duckdbMemoryLimitMb must be >= 0 (0 = DuckDB's own) (got -1)"),
    (dict(data_sources={"bad name": "duckdb://:memory:"}), "dataSources (BLOCKX_DATA_SOURCES): "),
    (dict(data_plane__state_dir=""),
     "dataPlane.stateDir (STATE_DIR) must not be empty when no dataSources are configured "
     "(it holds the default `local` DuckDB file)"),
    (dict(audit_mode="loud"), "auditMode (AUDIT_MODE) must be one of off, warn, enforce (got 'loud')"),
    (dict(audit_mode="warn"), "auditMode (AUDIT_MODE) is 'warn' but auditAllowlistFile (AUDIT_ALLOWLIST_FILE) is "
                              "empty: name the file of approved code digests (or set auditAllowlistEtcdPrefix "
                              "(AUDIT_ALLOWLIST_ETCD_PREFIX))"),
    (dict(audit_allowlist_etcd_prefix="audit"),
     "auditAllowlistEtcdPrefix (AUDIT_ALLOWLIST_ETCD_PREFIX) 'audit' must start and end with '/' "
     "(e.g. \"/blockx/audit/\")"),
    (dict(auth_mode="open"), "authMode (WORKER_AUTH_MODE) must be one of token, mtls, none (got 'open')"),
    (dict(auth_mode="mtls"), "authMode (WORKER_AUTH_MODE) is mtls but tlsClientCa (WORKER_TLS_CLIENT_CA) is not "
                             "set: the identity is the subject of a client certificate, so set tlsCert "
                             "(WORKER_TLS_CERT), tlsKey (WORKER_TLS_KEY) and tlsClientCa (WORKER_TLS_CLIENT_CA) "
                             "(the CA that signs the clients' certificates)"),
    (dict(shadow_submit_token_file="/nonexistent/token"),
     "shadowSubmitTokenFile (SHADOW_SUBMIT_TOKEN_FILE) '/nonexistent/token' is not a readable file"),
]


@pytest.mark.parametrize("changes,message", MOVED, ids=[next(iter(c)) for c, _ in MOVED])
def test_a_moved_rule_words_its_violation_as_before(changes, message):
    from tests.unit.app.test_config import broken
    problems = broken(**changes).violations()
    assert any(message in p for p in problems), problems
