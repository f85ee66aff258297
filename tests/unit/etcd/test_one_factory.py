"""Every etcd client is made by blockx.etcd.connection.EtcdConnection: no other
module that speaks to etcd (imports aetcd) opens a gRPC channel or an aetcd.Client
of its own, so an etcd setting (TLS, the etcd user) cannot apply to one client
and not to another."""
import pathlib
import re

import blockx

ROOT = pathlib.Path(blockx.__file__).resolve().parent
FACTORY = ROOT / "etcd" / "connection.py"
OPENS = re.compile(r"\b(insecure_channel|secure_channel|aetcd\.Client)\s*\(")


def test_only_the_factory_opens_etcd_channels():
    offenders = []
    for path in ROOT.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        if path == FACTORY or "aetcd" not in text:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OPENS.search(line):
                offenders.append(f"{path.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    assert not offenders, "etcd channels opened outside EtcdConnection:\n" + "\n".join(offenders)


def test_the_check_sees_what_main_had():
    # The plaintext channel `blockx functions push|list` and `blockx workers` used before.
    assert OPENS.search("        async with grpc.aio.insecure_channel(etcd_target(ep)) as ch:")
    assert OPENS.search("            c = aetcd.Client(host, port, **kwargs)")
