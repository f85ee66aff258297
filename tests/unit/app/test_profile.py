from dataclasses import replace

import pytest

from blockx.app.config import load_config
from blockx.app.profile import BLOCK, BUNDLE, DEV, PROFILES, Profile, ProfileError, get_profile
from blockx.plugins.builders import BuilderRegistry
from blockx.plugins.data.plane import DataPlane
from blockx.plugins.writers import PluginRegistry


def test_shipped_profiles_are_valid_and_named():
    for name, prof in PROFILES.items():
        prof.validate()
        assert get_profile(name) is prof
        assert prof.name == name


def test_block_profile():
    assert BLOCK.deployment == "block"
    assert BLOCK.worker_registry_prefix == "/blockx/workers/"
    assert BLOCK.builders == ("dbscan", "callList", "bundleScan")
    assert BLOCK.plugins == ("tableUpserts", "bundleWrite")
    assert BLOCK.tune_defaults is None


def test_bundle_profile_enables_streaming_through_tune_defaults_only():
    assert BUNDLE.deployment == "bundle"
    assert BUNDLE.worker_registry_prefix == "/blockx/bundle-workers/"
    assert BUNDLE.builders == ("bundleScan", "callList")
    assert BUNDLE.plugins == ("bundleWrite", "tableUpserts")
    assert load_config(BUNDLE, env={}).stream_build.enabled is True
    assert load_config(BUNDLE, env={"STREAM_BUILD_ENABLED": "0"}).stream_build.enabled is False


def test_registries_follow_the_profile():
    b = BuilderRegistry.from_names(BUNDLE.builders, data=DataPlane({}))
    assert b.names() == ["bundleScan", "callList"]
    assert b.get("static") is None  # not registered: tasks naming it fail BUILDER_NOT_FOUND
    p = PluginRegistry.from_names(DEV.plugins, data=DataPlane({}))
    assert p.names() == ["tableUpserts", "bundleWrite", "log", "test"]


DEV_BUILDERS = ("static", "payload", "rangeScan")
DEV_PLUGINS = ("log", "test")


@pytest.mark.parametrize("prof", [BLOCK, BUNDLE], ids=["block", "bundle"])
def test_production_profiles_register_no_dev_stub(prof):
    # The dev stubs are not production code: `test` sleeps as long as a client asks.
    builders = BuilderRegistry.from_names(prof.builders, data=DataPlane({}))
    plugins = PluginRegistry.from_names(prof.plugins, data=DataPlane({}))
    assert [n for n in DEV_BUILDERS if n in builders] == []
    assert [n for n in DEV_PLUGINS if n in plugins] == []


def test_dev_profile_is_block_plus_the_dev_stubs_with_streaming_on():
    assert DEV.deployment == "block"
    assert DEV.worker_registry_prefix == BLOCK.worker_registry_prefix
    assert DEV.builders == BLOCK.builders + DEV_BUILDERS
    assert DEV.plugins == BLOCK.plugins + DEV_PLUGINS
    assert get_profile("dev") is DEV
    # rangeScan stands in for a streaming scan, so in dev it streams by default.
    assert load_config(DEV, env={}).stream_build.enabled is True
    assert load_config(DEV, env={"STREAM_BUILD_ENABLED": "0"}).stream_build.enabled is False


def test_get_profile_unknown():
    with pytest.raises(ProfileError, match="unknown profile 'edge' \\(known: block, bundle, dev\\)"):
        get_profile("edge")


@pytest.mark.parametrize("changes,message", [
    (dict(deployment="edge"), "deployment must be one of block, bundle (got 'edge')"),
    (dict(service=" "), "service must not be empty"),
    (dict(worker_registry_prefix="/blockx/bundle-workers/"), "does not match deployment 'block'"),
    (dict(worker_registry_prefix="blockx"), "must start and end with '/'"),
    (dict(builders=()), "builders must name at least one call builder"),
    (dict(builders=("callList", "tableScan")),
     "unknown builder 'tableScan' (known: bundleScan, callList, dbscan, payload, rangeScan, static)"),
    (dict(builders=("callList", "callList")), "builder 'callList' is listed twice"),
    (dict(plugins=("log", "tableInserts")),
     "unknown plugin 'tableInserts' (known: bundleWrite, log, tableUpserts, test)"),
    (dict(plugins=("log", "log")), "plugin 'log' is listed twice"),
    (dict(tune_defaults=42), "tune_defaults must be callable"),
])
def test_validate_messages(changes, message):
    prof = replace(BLOCK, **changes)
    assert any(message in p for p in prof.violations()), prof.violations()
    with pytest.raises(ProfileError) as ei:
        prof.validate()
    assert message in str(ei.value)


def test_validate_collects_every_problem():
    prof = Profile(deployment="x", service="", worker_registry_prefix="", builders=(), plugins=("nope",))
    assert len(prof.violations()) == 5


def test_a_profile_without_plugins_is_valid():
    replace(BLOCK, plugins=()).validate()


# --- safe defaults: no example functions, no devstub unless configured ---------------------------


@pytest.mark.parametrize("prof", [BLOCK, BUNDLE], ids=["block", "bundle"])
def test_production_profiles_serve_no_function_and_no_devstub_by_default(prof):
    from blockx.plugins.io.scope import IOScopeFactory

    cfg = load_config(prof, env={})
    assert cfg.functions_dir == "" and cfg.functions_source == "dir"
    assert cfg.io_backends.devstub.enabled is False
    assert "devstub" not in IOScopeFactory.from_config(cfg).backends
    assert cfg.violations(prof) == []                  # and it is a valid config


@pytest.mark.parametrize("prof", [BLOCK, BUNDLE], ids=["block", "bundle"])
def test_production_profiles_serve_what_is_configured_explicitly(prof, tmp_path):
    cfg = load_config(prof, env={"FUNCTIONS_DIR": str(tmp_path), "IO_DEVSTUB_ENABLED": "true"})
    assert cfg.functions_dir == str(tmp_path) and cfg.io_backends.devstub.enabled is True


def test_the_dev_profile_serves_the_examples_and_the_devstub():
    from blockx.app.config import default_functions_dir

    cfg = load_config(DEV, env={})
    assert cfg.functions_dir == default_functions_dir() and cfg.io_backends.devstub.enabled is True
    # an explicit value still wins over the profile's default
    cfg = load_config(DEV, env={"FUNCTIONS_DIR": "/srv/fn", "IO_DEVSTUB_ENABLED": "false"})
    assert cfg.functions_dir == "/srv/fn" and cfg.io_backends.devstub.enabled is False
