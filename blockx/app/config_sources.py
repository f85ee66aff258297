"""Applying one configuration source onto a loaded config: a decoded JSON object,
the WORKER_CONFIG file, or the environment (blockx.app.config.load_config runs
them in the load order its docstring states).

Only the keys / variables present override. Each source collects every bad key
or value before failing, so one ConfigError lists them all; an unknown JSON key
gets a "did you mean" pointing at the right path when the key exists elsewhere
(a common mistake is a nested key written at the top level)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blockx.app.config_fields import env_name, iter_leaves, json_name, public_fields, type_hints
from blockx.app.config_values import env_value, json_value
from blockx.core.config_error import ConfigError
from blockx.json_types import json_type as _json_type

if TYPE_CHECKING:
    from blockx.app.config import WorkerFullConfig


def apply_json(cfg: WorkerFullConfig, data: Any, source: str = "config") -> None:
    """Override cfg with the keys present in `data` (a decoded JSON object)."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: the top level must be a JSON object, got {_json_type(data)}"])
    _apply_obj(cfg, data, "", cfg, problems)
    if problems:
        raise ConfigError([f"{source}: {p}" for p in problems])


def _apply_obj(obj, data: dict, path: str, root, problems: list[str]) -> None:
    by_json = {json_name(f): f for f in public_fields(obj)}
    for key, value in data.items():
        f = by_json.get(key)
        full = f"{path}{key}"
        if f is None:
            hint = _suggest(key, path, list(by_json), root)
            where = f" in {path[:-1]!r}" if path else ""
            problems.append(f"unknown key {full!r}{where}{hint}")
            continue
        t = type_hints(type(obj))[f.name]
        if is_dataclass(t):
            if not isinstance(value, dict):
                problems.append(f"{full}: expected an object, got {_json_type(value)}")
                continue
            _apply_obj(getattr(obj, f.name), value, full + ".", root, problems)
            continue
        try:
            setattr(obj, f.name, json_value(full, t, value))
        except ValueError as exc:
            problems.append(str(exc))


def _suggest(key: str, path: str, siblings: list[str], root) -> str:
    """' (did you mean ...?)' for a key put at the wrong level or misspelt; `root` is
    the whole config, whose every field path is a candidate."""
    leaves = [p for p, _o, _f, _t in iter_leaves(root)]
    exact = [p for p in leaves if p.rsplit(".", 1)[-1] == key]
    if exact:
        return f" (did you mean {exact[0]!r}?)"
    close = difflib.get_close_matches(key, siblings, n=1)
    if close:
        return f" (did you mean {path + close[0]!r}?)"
    lowered = {p.rsplit(".", 1)[-1].lower(): p for p in leaves}
    close = difflib.get_close_matches(key.lower(), list(lowered), n=1)
    return f" (did you mean {lowered[close[0]]!r}?)" if close else ""


def apply_env(cfg: WorkerFullConfig, env: Mapping[str, str]) -> None:
    """Override cfg with every set environment variable the config knows."""
    problems: list[str] = []
    for path, owner, f, t in iter_leaves(cfg):
        name = env_name(path, f)
        if not name or name not in env:
            continue
        text = env[name]
        try:
            setattr(owner, f.name, env_value(t, f.metadata.get("env_kind"), text))
        except ValueError as exc:
            problems.append(f"{name} (for {path}): {exc}")
    if problems:
        raise ConfigError(problems, header="invalid environment variable")


def load_config_file(cfg: WorkerFullConfig, path: str) -> None:
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([f"WORKER_CONFIG file {path!r} cannot be read: {exc.strerror or exc}"]) from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError([f"WORKER_CONFIG file {path!r} is not valid JSON: {exc}"]) from None
    apply_json(cfg, data, source=f"WORKER_CONFIG file {path!r}")
