"""Profile: what distinguishes one deployment form of the Worker from another.

An entry point declares a Profile and hands it to `run.serve`; it never wires
anything itself. A Profile only selects: which
builders and plugins are registered (a builder not listed is not registered,
and tasks naming it fail with BUILDER_NOT_FOUND), the etcd registry prefix, the
service label, and `tune_defaults`, which may change built-in defaults but never
an explicitly configured value (it runs before the WORKER_CONFIG file and env).

Safe defaults: the production profiles (block, bundle) serve no function and no
`devstub` IO backend until they are configured (FUNCTIONS_DIR or
FUNCTIONS_SOURCE=etcd; ioBackends.devstub.enabled). Only `dev` defaults to the
shipped example functions and the devstub backend, through its tune_defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from blockx.app.config_checks import check_registry_prefix
from blockx.core.config_error import ConfigError
from blockx.plugins.builders import KNOWN_BUILDERS
from blockx.plugins.writers import KNOWN_PLUGINS

if TYPE_CHECKING:
    from blockx.app.config import WorkerFullConfig

DEPLOYMENTS = ("block", "bundle")
BLOCK_REGISTRY_PREFIX = "/blockx/workers/"
BUNDLE_REGISTRY_PREFIX = "/blockx/bundle-workers/"


class ProfileError(ConfigError):
    """A Profile that cannot run; `problems` lists each reason."""

    def __init__(self, problems: list[str]):
        super().__init__(problems, header="invalid profile")


@dataclass(frozen=True)
class Profile:
    deployment: str
    service: str
    worker_registry_prefix: str
    builders: tuple[str, ...]
    plugins: tuple[str, ...]
    tune_defaults: Callable[[WorkerFullConfig], None] | None = field(default=None, compare=False)
    name: str = ""

    def violations(self) -> list[str]:
        out: list[str] = []
        if self.deployment not in DEPLOYMENTS:
            out.append(f"deployment must be one of {', '.join(DEPLOYMENTS)} (got {self.deployment!r})")
        if not self.service or not self.service.strip():
            out.append("service must not be empty (it labels traces and metrics)")
        check_registry_prefix(self.worker_registry_prefix, self.deployment, "worker_registry_prefix", out)
        if not self.builders:
            out.append("builders must name at least one call builder")
        for kind, names, known in (("builder", self.builders, KNOWN_BUILDERS),
                                   ("plugin", self.plugins, KNOWN_PLUGINS)):
            seen: set[str] = set()
            for n in names:
                if n in seen:
                    out.append(f"{kind} {n!r} is listed twice")
                seen.add(n)
                if n not in known:
                    out.append(f"unknown {kind} {n!r} (known: {', '.join(sorted(known))})")
        if self.tune_defaults is not None and not callable(self.tune_defaults):
            out.append("tune_defaults must be callable")
        return out

    def validate(self) -> None:
        problems = self.violations()
        if problems:
            raise ProfileError(problems)


def _stream_builds(cfg: WorkerFullConfig) -> None:
    # Bundle tasks are large scans: produce calls in batches under the credit
    # window instead of materialising the whole call list.
    cfg.stream_build.enabled = True


def _dev_defaults(cfg: WorkerFullConfig) -> None:
    # The README tour, the e2e suites and the load benchmark run the shipped
    # examples, some of which do IO through the devstub backend.
    from blockx.app.config import default_functions_dir

    _stream_builds(cfg)
    cfg.functions_dir = default_functions_dir()
    cfg.io_backends.devstub.enabled = True


# Production profiles register only real builders and plugins (docs/grpc.md lists them:
# block has dbscan, callList, bundleScan and every plugin; bundle has bundleScan and
# callList with bundleWrite and tableUpserts). The dev stubs (builders static,
# payload and rangeScan, a stand-in for a streaming scan; plugins log and test,
# which a client can make sleep for minutes) live in DEV only.
BLOCK = Profile(
    deployment="block",
    service="blockx-worker",
    worker_registry_prefix=BLOCK_REGISTRY_PREFIX,
    builders=("dbscan", "callList", "bundleScan"),
    plugins=("tableUpserts", "bundleWrite"),
    name="block",
)

BUNDLE = Profile(
    deployment="bundle",
    service="blockx-bundle-worker",
    worker_registry_prefix=BUNDLE_REGISTRY_PREFIX,
    builders=("bundleScan", "callList"),
    plugins=("bundleWrite", "tableUpserts"),
    tune_defaults=_stream_builds,
    name="bundle",
)

# Block plus the dev stubs, for the README tour, the e2e suites and the load
# benchmark. Streaming build is on, so rangeScan streams as a real bundle scan would;
# the shipped example functions and the devstub IO backend are served by default.
DEV = Profile(
    deployment="block",
    service="blockx-dev-worker",
    worker_registry_prefix=BLOCK_REGISTRY_PREFIX,
    builders=BLOCK.builders + ("static", "payload", "rangeScan"),
    plugins=BLOCK.plugins + ("log", "test"),
    tune_defaults=_dev_defaults,
    name="dev",
)

PROFILES = {"block": BLOCK, "bundle": BUNDLE, "dev": DEV}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ProfileError([f"unknown profile {name!r} (known: {', '.join(PROFILES)})"]) from None
