import hashlib
import logging

import orjson
import pytest

from blockx.plugins.data.plane import DataPlane
from blockx.plugins.plugin_api import PluginContext, PluginError, PluginResult, Plugin
from blockx.plugins.writers import KNOWN_PLUGINS, PluginRegistry
from blockx.plugins.writers.devtest import TestPlugin, outputs_digest
from blockx.plugins.writers.log import LogPlugin

CTX = PluginContext(task_id="task-7")
OUTS = [b"3", b'{"a":1}', b'"x"']


async def test_test_plugin_ok_reports_count_and_digest():
    r = await TestPlugin().execute(b"", OUTS, CTX)
    assert r.plugin == "test" and r.ok and r.message == "3 output(s)"
    details = orjson.loads(r.details)
    assert details["count"] == 3
    h = hashlib.sha256()
    for o in OUTS:
        h.update(len(o).to_bytes(8, "big") + o)
    assert details["digest"] == h.hexdigest() == outputs_digest(OUTS)


def test_digest_counts_output_boundaries():
    assert outputs_digest([b"ab", b"c"]) != outputs_digest([b"a", b"bc"])
    assert outputs_digest([]) == hashlib.sha256().hexdigest()


async def test_test_plugin_fail_and_message():
    r = await TestPlugin().execute(b'{"fail": true, "message": "disk full"}', OUTS, CTX)
    assert r == PluginResult("test", False, "disk full", b"")
    r = await TestPlugin().execute(b'{"fail": true}', OUTS, CTX)
    assert not r.ok and "failed as configured" in r.message
    r = await TestPlugin().execute(b'{"message": "fine"}', OUTS, CTX)
    assert r.ok and r.message == "fine"


async def test_test_plugin_raise_and_expect_count_and_sleep():
    with pytest.raises(PluginError, match="kaboom"):
        await TestPlugin().execute(b'{"raise": true, "message": "kaboom"}', OUTS, CTX)
    r = await TestPlugin().execute(b'{"expectCount": 2}', OUTS, CTX)
    assert not r.ok and r.message == "test: expected 2 output(s), got 3"
    assert (await TestPlugin().execute(b'{"expectCount": 3, "sleepMs": 5}', OUTS, CTX)).ok


@pytest.mark.parametrize("config,message", [
    (b"{oops", "test: the result handler config is not valid JSON"),
    (b"[1]", "test: the result handler config must be a JSON object"),
    (b'{"sleepMs": -1}', "sleepMs must be an integer between 0 and"),
    (b'{"sleepMs": "5"}', "sleepMs must be an integer between 0 and"),
    (b'{"message": 5}', "message must be a string"),
])
async def test_test_plugin_bad_config_fails_clearly(config, message):
    r = await TestPlugin().execute(config, OUTS, CTX)
    assert not r.ok and message in r.message


async def test_log_plugin_logs_a_summary(caplog):
    caplog.set_level(logging.DEBUG, logger="blockx.plugins.log")
    outs = [b'"' + b"y" * 300 + b'"'] + [b"1"] * 4
    r = await LogPlugin().execute(b'{"maxOutputs": 2, "maxOutputBytes": 10}', outs, CTX)
    assert r.ok and r.plugin == "log"
    assert orjson.loads(r.details) == {"count": 5, "bytes": 302 + 4}
    (rec,) = [x for x in caplog.records if x.name == "blockx.plugins.log"]
    text = rec.getMessage()
    assert "task task-7: 5 output(s), 306 bytes" in text
    assert '"yyyyyyyyy...' in text and "(+3 more)" in text
    assert rec.levelno == logging.INFO


async def test_log_plugin_level_and_bad_config(caplog):
    caplog.set_level(logging.DEBUG, logger="blockx.plugins.log")
    assert (await LogPlugin().execute(b'{"level": "warning"}', [], None)).ok
    assert caplog.records[-1].levelno == logging.WARNING
    r = await LogPlugin().execute(b'{"level": "loud"}', [], None)
    assert not r.ok and "level must be one of" in r.message
    r = await LogPlugin().execute(b'{"maxOutputs": -1}', [], None)
    assert not r.ok and "maxOutputs must be a non-negative integer" in r.message


def test_plugin_registry():
    reg = PluginRegistry.from_names(sorted(KNOWN_PLUGINS), data=DataPlane({}))
    assert reg.names() == ["bundleWrite", "log", "tableUpserts", "test"] and len(reg) == 4
    assert isinstance(reg.get("test"), Plugin) and isinstance(reg.get("tableUpserts"), Plugin)
    assert reg.get("tableInserts") is None and "log" in reg
    with pytest.raises(ValueError, match="'tableUpserts' needs the Worker's data plane"):
        PluginRegistry.from_names(["tableUpserts"])
    with pytest.raises(ValueError, match="unknown writer plugin 'x'"):
        PluginRegistry.from_names(["x"])
    with pytest.raises(ValueError, match="registered twice"):
        PluginRegistry([LogPlugin(), LogPlugin()])
