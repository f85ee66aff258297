"""`blockx serve --print-config` prints no secret of any form the config can hold:
URLs' passwords (dataSources, functionsRedisUrl, etcdEndpoints), secret query
parameters (password, sslpassword, an RPC URL's apikey), RPC header values and
etcdPassword; and its output still says which server each setting names."""
import json

from blockx import cli

SECRETS = ("pg-pass-1", "pg-query-2", "pg-sslpass-3", "duck-q-4", "redis-pw-5", "rpc-user-pw-6",
           "rpc-apikey-7", "rpc-header-8", "etcd-pass-9", "etcd-url-pw-10")


def test_print_config_hides_every_secret(monkeypatch, capsys, tmp_path):
    cfg = {
        "dataSources": {
            "chain": "postgresql://blockx:pg-pass-1@127.0.0.1:5432/chain",
            "warehouse": "postgresql://127.0.0.1/w?user=r&password=pg-query-2&sslpassword=pg-sslpass-3",
            "local": f"duckdb://{tmp_path}/l.duckdb?motherduck_token=duck-q-4",
        },
        "functionsRedisUrl": "redis://:redis-pw-5@127.0.0.1:6379/0",
        "etcdEndpoints": ["http://root:etcd-url-pw-10@127.0.0.1:2379"],
        "ioBackends": {"rpc": {"endpoints": {"eth": {
            "urls": ["https://node:rpc-user-pw-6@127.0.0.1:8545/", "https://127.0.0.1:8546/?apikey=rpc-apikey-7"],
            "headers": {"X-Api-Key": "rpc-header-8", "Authorization": {"env": "RPC_AUTH"}}}}}},
    }
    path = tmp_path / "w.json"
    path.write_text(json.dumps(cfg))
    monkeypatch.setenv("ETCD_PASSWORD", "etcd-pass-9")
    monkeypatch.setenv("ETCD_USER", "root")
    monkeypatch.delenv("WORKER_CONFIG", raising=False)
    cli.main(["serve", "--profile", "dev", "--config", str(path), "--print-config"])
    out, err = capsys.readouterr()
    for secret in SECRETS:
        assert secret not in out and secret not in err, secret
    doc = json.loads(out)
    assert doc["dataSources"]["chain"] == "postgresql://blockx:***@127.0.0.1:5432/chain"
    assert doc["dataSources"]["warehouse"] == "postgresql://127.0.0.1/w?user=r&password=***&sslpassword=***"
    assert doc["functionsRedisUrl"] == "redis://:***@127.0.0.1:6379/0"
    assert doc["etcdEndpoints"] == ["http://root:***@127.0.0.1:2379"]
    eth = doc["ioBackends"]["rpc"]["endpoints"]["eth"]
    assert eth["urls"] == ["https://node:***@127.0.0.1:8545/", "https://127.0.0.1:8546/?apikey=***"]
    assert eth["headers"] == {"X-Api-Key": "***", "Authorization": {"env": "RPC_AUTH"}}
    assert doc["etcdPassword"] == "***"


def test_a_refused_config_names_its_urls_without_their_secrets(monkeypatch, capsys, tmp_path):
    cfg = {"dataSources": {"x": "mysql://u:pw-err-1@127.0.0.1/db"},
           "ioBackends": {"rpc": {"endpoints": {"e": {"urls": ["ftp://u:pw-err-2@127.0.0.1/?apikey=pw-err-3"]}}}}}
    path = tmp_path / "w.json"
    path.write_text(json.dumps(cfg))
    monkeypatch.delenv("WORKER_CONFIG", raising=False)
    code = cli.main(["serve", "--profile", "dev", "--config", str(path), "--print-config"])
    out, err = capsys.readouterr()
    assert code == 2 and "ioBackends.rpc.endpoints.e.urls" in err and "ftp://127.0.0.1/?apikey=***" in err
    for secret in ("pw-err-1", "pw-err-2", "pw-err-3"):
        assert secret not in out and secret not in err, secret
