"""ioBackends.rpc: endpoints from the file and the environment, every problem named
with its path at start-up, header secrets read from the environment and never
printed, and the rpc backend on only when endpoints are configured."""
import json

import pytest

from blockx.app.config import ConfigError, load_config
from blockx.app.profile import BLOCK, DEV
from blockx.plugins.io.scope import IOScopeFactory

EP = {"main": {"urls": ["http://127.0.0.1:8545", "https://u:secret@node.example/v3/KEY"],
               "headers": {"Authorization": {"env": "NODE_TOKEN"}, "X-Team": "chain"},
               "timeoutMs": 1500}}


def load(env=None, path=None, profile=BLOCK):
    return load_config(profile, env={"ETCD_ENDPOINTS": "none", **(env or {})}, config_path=path)


def test_endpoints_from_the_file_with_defaults_and_header_values_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_TOKEN", "Bearer t0ken")
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"ioBackends": {"rpc": {"endpoints": EP, "concurrency": 3}}}))
    cfg = load(path=str(f))
    assert cfg.violations() == []
    backend = IOScopeFactory.from_config(cfg).backends["rpc"]
    lane = backend._lanes["main"]
    ep = lane.endpoint
    assert ep.urls == tuple(EP["main"]["urls"]) and ep.timeout_ms == 1500 and ep.concurrency == 3
    assert dict(ep.headers) == {"Authorization": "Bearer t0ken", "X-Team": "chain"}
    printed = json.dumps(cfg.to_dict())
    assert "secret" not in printed and "t0ken" not in printed and "NODE_TOKEN" in printed
    assert '"chain"' not in printed                     # a literal header value is hidden too
    assert cfg.to_dict()["ioBackends"]["rpc"]["endpoints"]["main"]["urls"][0] == "http://127.0.0.1:8545"


def test_the_environment_variable_and_no_backend_without_endpoints(monkeypatch):
    monkeypatch.setenv("NODE_TOKEN", "x")
    cfg = load({"RPC_ENDPOINTS": json.dumps(EP), "RPC_IO_MAX_QUEUE": "7"})
    assert cfg.io_backends.rpc.max_queue == 7 and list(cfg.io_backends.rpc.endpoints) == ["main"]
    assert "rpc" in IOScopeFactory.from_config(cfg).backends
    for profile in (BLOCK, DEV):             # not even the dev profile invents an endpoint
        assert "rpc" not in IOScopeFactory.from_config(load(profile=profile)).backends


@pytest.mark.parametrize("endpoints,needle", [
    ({"main": {"urls": []}}, "ioBackends.rpc.endpoints.main.urls: expected a non-empty list"),
    ({"main": {"urls": ["ftp://x"]}}, "'ftp://x' is not an http:// or https:// URL"),
    ({"main": {}}, "ioBackends.rpc.endpoints.main.urls: expected a non-empty list"),
    ({"main": {"urls": ["http://a"], "url": "x"}}, "unknown key(s) 'url' (allowed: urls, headers"),
    ({"main": {"urls": ["http://a"], "timeoutMs": 0}}, "ioBackends.rpc.endpoints.main.timeoutMs must be an integer > 0"),
    ({"main": {"urls": ["http://a"], "concurrency": "4"}}, "endpoints.main.concurrency must be an integer > 0"),
    ({"main": {"urls": ["http://a"], "headers": {"Authorization": {"env": "NO_SUCH_VAR_RPC"}}}},
     "ioBackends.rpc.endpoints.main.headers.Authorization: environment variable NO_SUCH_VAR_RPC is not set"),
    ({"main": {"urls": ["http://a"], "headers": {"Content-Type": "text/plain"}}}, "'Content-Type' is not a header"),
    ({"main": {"urls": ["http://a"], "headers": {"X": "a\r\nB: c"}}}, "holds a line break"),
    ({"bad name": {"urls": ["http://a"]}}, "an endpoint name is 1-64 letters"),
])
def test_bad_endpoints_are_refused_at_start_naming_the_path(endpoints, needle):
    cfg = load({"RPC_ENDPOINTS": json.dumps(endpoints)})
    problems = cfg.violations()
    assert any(needle in p for p in problems), problems


@pytest.mark.parametrize("env,needle", [
    ({"RPC_IO_MAX_QUEUE": "0"}, "ioBackends.rpc.maxQueue (RPC_IO_MAX_QUEUE) must be"),
    ({"RPC_IO_MAX_RESPONSE_BYTES": str(64 * 1024 * 1024)}, "ioBackends.rpc.maxResponseBytes"),
    ({"RPC_IO_TIMEOUT_MS": "0"}, "ioBackends.rpc.timeoutMs (RPC_IO_TIMEOUT_MS)"),
])
def test_bad_backend_settings(env, needle):
    assert any(needle in p for p in load(env).violations())


@pytest.mark.parametrize("text,needle", [
    ("{nope", "RPC_ENDPOINTS (for ioBackends.rpc.endpoints): is not valid JSON"),
    ('{"main": "http://a"}', "expected a JSON object of objects, got object"),
])
def test_bad_environment_text(text, needle):
    with pytest.raises(ConfigError) as ei:
        load({"RPC_ENDPOINTS": text})
    assert needle in str(ei.value)


def test_bad_file_type(tmp_path):
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"ioBackends": {"rpc": {"endpoints": {"main": ["http://a"]}}}}))
    with pytest.raises(ConfigError, match="ioBackends.rpc.endpoints: expected an object of objects"):
        load(path=str(f))
