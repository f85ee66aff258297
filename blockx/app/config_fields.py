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

from blockx.redaction import MASK, redact_value

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
    """The config tree under its JSON names, as `--print-config` prints it: every
    secret hidden (blockx.redaction: URLs' passwords and secret query parameters,
    header values) and a field named like a password shown as ``***``."""
    out: dict[str, Any] = {}
    for f in public_fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            out[json_name(f)] = to_dict(value)
            continue
        if isinstance(value, str) and value and f.name.endswith("password"):
            value = MASK                      # etcdPassword: a secret, never printed
        elif isinstance(value, (str, list, dict)):
            value = redact_value(list(value) if isinstance(value, list) else value)
        out[json_name(f)] = value
    return out


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
