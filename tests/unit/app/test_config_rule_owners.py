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
    for field, module in (("trace_max_events_per_task", "blockx/adapters/trace_recorder.py"),
                          ("max_result_bytes", "blockx/plugins/io/sql.py"),
                          ("executor_max_inflight", "blockx/core/dispatch/config.py")):
        assert owners.get(field) == module


@pytest.mark.parametrize("line", [
    "from blockx.adapters.executor.outbox_limits import OUTBOX_DEPTH",
    "from blockx.adapters.trace_recorder import MIN_MAX_EVENTS as MIN_TRACE_EVENTS, RETAINED_FLOOR_EVENTS",
    "from blockx.plugins.data.urls import parse_source_url",
    "def f():\n    from blockx.plugins.function_code_redis import RedisCodeKeys, redacted_url",
    "def f():\n    from blockx.adapters.audit import AUDIT_MODES, AuditAllowlist, AuditAllowlistError",
    "import blockx.adapters.auth"])
def test_an_import_of_anything_but_a_rule_is_found(line):
    assert foreign_imports(line + "\n")


@pytest.mark.parametrize("line", [
    "from blockx.adapters.trace_recorder import TRACE_RULES",
    "from blockx.adapters.executor.outbox_limits import inflight_problem",
    "def f():\n    from blockx.adapters.audit import audit_problems",
    "from blockx.core.config import CONFIG_RULES, deadline_problem",
    "from blockx.app.addresses import split_host_port"])
def test_a_rule_import_is_not_flagged(line):
    assert foreign_imports(line + "\n") == []


def test_a_section_rule_written_in_the_app_is_found():
    src = 'IO = (Rule("concurrency", 1), Rule("timeout_ms", 0, note="0 = phaseIoTimeoutMs"))\n'
    assert rule_fields(src) - {f.name for f in fields(WorkerFullConfig)} == {"concurrency", "timeout_ms"}
