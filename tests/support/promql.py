"""What the shipped dashboard and alert rules query: their
PromQL expressions, and the metric names those expressions read.

`metric_names` is deliberately small: it removes string literals, label
matchers, range selectors, grouping clauses (by / without / on / ignoring /
group_left / group_right) and Grafana variables, then keeps every identifier
that is neither a function or aggregation (followed by "(") nor a keyword.
The expressions it reads are our own, and promtool checks their syntax."""
from __future__ import annotations

import json
import pathlib
import re

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "blockx-worker.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
ALERTS_TEST = ROOT / "deploy" / "prometheus" / "alerts_test.yml"

# Series Prometheus itself adds to every scrape target.
PROMETHEUS_SYNTHETIC = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})

_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
                       "group_left", "group_right", "inf", "nan", "atan2"})
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    s = _STRING.sub('""', expr)
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _GROUPING.sub(" ", s)
    s = re.sub(r"\$\{?\w+\}?", " ", s)
    names = set()
    for m in _IDENT.finditer(s):
        tok = m.group(0)
        before = s[m.start() - 1] if m.start() else " "
        if before.isdigit() or before == ".":      # 1e3, 0.5e1
            continue
        if s[m.end():].lstrip().startswith("(") or tok.lower() in _KEYWORDS:
            continue
        names.add(tok)
    return names


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dash: dict | None = None) -> list[dict]:
    """Every panel, rows' nested panels included."""
    out = []
    for p in (dash or dashboard())["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def dashboard_exprs(dash: dict | None = None) -> list[str]:
    exprs = [t["expr"] for p in dashboard_panels(dash) for t in p.get("targets", []) if t.get("expr")]
    for var in (dash or dashboard())["templating"]["list"]:
        q = var.get("query")
        if var.get("type") == "query":
            q = q["query"] if isinstance(q, dict) else q
            m = re.fullmatch(r"label_values\((.+),\s*\w+\)", q)
            exprs.append(m.group(1) if m else q)
    return exprs


def alert_rules() -> list[dict]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [r for g in doc["groups"] for r in g["rules"]]


def alert_exprs() -> list[str]:
    return [r["expr"] for r in alert_rules()]


def exported_names(metrics_text: str) -> set[str]:
    """Every series name a Prometheus text exposition (0.0.4) can put in
    Prometheus: the sample names, plus the names of each declared family that
    has no sample yet (a labelled counter before its first increment). A
    counter family is declared under its `_total` name; a histogram under its
    bare name, which is never a series itself (only _bucket / _sum / _count)."""
    series_of = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("", "_sum", "_count")}
    names: set[str] = set()
    for line in metrics_text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            names.update(name + suffix for suffix in series_of.get(kind, ("",)))
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, maxsplit=1)[0])
    return names
