"""dataSources, dataPlane and ioBackends.sql: loaded from the file and the
environment, checked at start-up, and never printed with a password."""
import json

import pytest

from blockx.app.config import ConfigError, load_config
from blockx.app.profile import BUNDLE


def load(env=None, path=None):
    return load_config(BUNDLE, env=env or {}, config_path=path)


def test_data_sources_from_the_environment_and_the_file(tmp_path):
    cfg = load({"BLOCKX_DATA_SOURCES": '{"main": "postgresql://u@db/app"}'})
    assert cfg.data_sources == {"main": "postgresql://u@db/app"}
    assert cfg.violations() == []
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"dataSources": {"local": "duckdb:///srv/x.duckdb"}, "dataPlane": {"bundleRoot": "/b"}}))
    cfg = load(path=str(f))
    assert cfg.data_sources == {"local": "duckdb:///srv/x.duckdb"} and cfg.data_plane.bundle_root == "/b"


@pytest.mark.parametrize("text,needle", [
    ("{not json", "BLOCKX_DATA_SOURCES (for dataSources): is not valid JSON"),
    ('["x"]', "expected a JSON object of strings, got array"),
    ('{"main": 5}', "expected a JSON object of strings"),
])
def test_bad_environment_values(text, needle):
    with pytest.raises(ConfigError) as ei:
        load({"BLOCKX_DATA_SOURCES": text})
    assert needle in str(ei.value)


def test_bad_file_values(tmp_path):
    f = tmp_path / "w.json"
    f.write_text(json.dumps({"dataSources": {"main": 1}}))
    with pytest.raises(ConfigError, match="dataSources: expected an object of strings, got object"):
        load(path=str(f))


def test_bad_urls_and_settings_are_violations():
    cfg = load({"BLOCKX_DATA_SOURCES": '{"main": "mysql://u:secret@h/db", "9x": "duckdb://:memory:"}',
                "SQL_IO_MAX_ROWS": "0", "SQL_IO_TIMEOUT_MS": "0"})
    problems = cfg.violations()
    text = "\n".join(problems)
    assert "dataSources (BLOCKX_DATA_SOURCES): source 'main': unsupported scheme 'mysql'" in text
    assert "source name '9x' must start with a letter" in text
    assert "ioBackends.sql.maxRows (SQL_IO_MAX_ROWS) must be > 0" in text
    assert "ioBackends.sql.timeoutMs (SQL_IO_TIMEOUT_MS) must be > 0" in text
    assert "secret" not in text


def test_printed_config_hides_passwords():
    cfg = load({"BLOCKX_DATA_SOURCES": '{"main": "postgresql://app:s3cret@db:5432/app", "l": "duckdb:///x"}'})
    printed = cfg.to_json()
    assert "s3cret" not in printed
    assert cfg.to_dict()["dataSources"] == {"main": "postgresql://app:***@db:5432/app", "l": "duckdb:///x"}
    assert cfg.data_sources["main"] == "postgresql://app:s3cret@db:5432/app"     # only the print is masked


def test_the_data_plane_caps_are_checked_by_name():
    cfg = load({"SQL_IO_MAX_RESULT_BYTES": str(64 * 1024 * 1024), "SCAN_MAX_ROW_BYTES": "0", "BUNDLE_MAX_FILES": "0"})
    text = "\n".join(cfg.violations())
    assert ("ioBackends.sql.maxResultBytes (SQL_IO_MAX_RESULT_BYTES) must be between 1 and 15728640 "
            "(a result travels in one 16 MiB frame)") in text
    assert "dataPlane.scanMaxRowBytes (SCAN_MAX_ROW_BYTES) must be > 0" in text
    assert "dataPlane.bundleMaxFiles (BUNDLE_MAX_FILES) must be > 0" in text
