"""Field metadata of the configuration dataclasses, and walks over them.

Every field declares its JSON name (the camelCase path of WORKER_CONFIG; derived from the
Python name unless given) and, where it has one, its environment variable,
so loading, `to_dict()` and the error messages all speak the names an operator
types. The walks here are generic over any tree of such dataclasses and never
name WorkerFullConfig, so the modules that load and check a config can use them
without importing it (and without an import cycle)."""

from __future__ import annotations

from dataclasses import MISSING, field, fields, is_dataclass
from typing import Any, get_type_hints

# Environment variables that belong to nested fields (the nested field's metadata
# names the variable of a top-level setting; these are the nested ones that have one too).
EXTRA_ENV = {
    "ioBackends.devstub.concurrency": "IO_DEVSTUB_CONCURRENCY",
    "ioBackends.devstub.enabled": "IO_DEVSTUB_ENABLED",
}

_HINTS: dict[type, dict[str, Any]] = {}


def config_field(default: Any = MISSING, *, env: str | None = None, json_name: str | None = None,
                 default_factory: Any = MISSING, env_kind: str | None = None, doc: str = ""):
    md = {"env": env, "json": json_name, "env_kind": env_kind, "doc": doc}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=md)
    return field(default=default, metadata=md)


def type_hints(cls: type) -> dict[str, Any]:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = get_type_hints(cls)
    return h


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def json_name(f) -> str:
    return f.metadata.get("json") or camel(f.name)


def public_fields(obj_or_cls):
    return [f for f in fields(obj_or_cls) if not f.metadata.get("internal")]


def to_dict(obj) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in public_fields(obj):
        value = getattr(obj, f.name)
        if isinstance(value, dict):
            # dataSources, rpc endpoints: URLs may hold passwords, never printed
            value = {k: _redacted(v) for k, v in value.items()}
        if f.name.endswith("password") and value:
            value = "***"                     # etcdPassword: a secret, never printed
        out[json_name(f)] = to_dict(value) if is_dataclass(value) else (
            list(value) if isinstance(value, list) else value)
    return out


def _redacted(value):
    """A dataSources URL, or an rpc endpoint object, without passwords: its urls
    redacted and its literal header values hidden ({"env": VAR} names stay)."""
    if isinstance(value, str):
        return redact_url(value)
    if not isinstance(value, dict):
        return value
    out = dict(value)
    urls = value.get("urls")
    if isinstance(urls, list):
        out["urls"] = [redact_url(u) if isinstance(u, str) else u for u in urls]
    elif isinstance(urls, str):
        out["urls"] = redact_url(urls)
    headers = value.get("headers")
    if isinstance(headers, dict):
        out["headers"] = {h: "***" if isinstance(v, str) else v for h, v in headers.items()}
    return out


def redact_url(url: str) -> str:
    """scheme://user:secret@host/... -> scheme://user:***@host/..."""
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in creds:
        return url
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}"


def iter_leaves(obj, path: str = ""):
    """(json_path, owner, field, type) of every scalar field."""
    for f in public_fields(obj):
        t = type_hints(type(obj))[f.name]
        p = f"{path}{json_name(f)}"
        value = getattr(obj, f.name)
        if is_dataclass(value):
            yield from iter_leaves(value, p + ".")
        else:
            yield p, obj, f, t


def env_name(path: str, f) -> str | None:
    """The environment variable of the leaf field `f` at JSON path `path`, if any."""
    return f.metadata.get("env") or EXTRA_ENV.get(path)


def env_vars_of(root) -> dict[str, str]:
    """Environment variable -> JSON path for every leaf of the config tree `root`."""
    out = {}
    for path, _owner, f, _t in iter_leaves(root):
        env = env_name(path, f)
        if env:
            out[env] = path
    return out
