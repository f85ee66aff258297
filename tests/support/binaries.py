"""What a test does when a server binary it needs (etcd, PostgreSQL, Redis,
promtool, ip, ...) is not installed: ``missing(what, target)``.

`make check` (the test command for an edit: no root, no apt) runs the
integration suites on whatever this machine has: such a test skips, naming the
`make` target that installs the binary, so the skip says exactly what was not
run and how to run it. `make test` (CI) installs every one first and sets
REQUIRE_TEST_BINARIES=1: there a missing binary fails the test, because a suite
that exists to exercise a real server must never pass by not running."""
from __future__ import annotations

import os
from typing import NoReturn

import pytest

REQUIRE_ENV = "BLOCKX_REQUIRE_TEST_BINARIES"


def required() -> bool:
    return os.environ.get(REQUIRE_ENV, "") not in ("", "0")


def missing(what: str, fix: str) -> NoReturn:
    """Skip (or, under REQUIRE_TEST_BINARIES, fail) a test that needs ``what``;
    ``fix`` says how to get it, e.g. "run `make etcd` (apt-get install etcd-server)"."""
    unavailable(f"{what} is not installed: {fix}")


def unavailable(reason: str) -> NoReturn:
    """``missing`` for what is not a binary (root, a kernel capability)."""
    if required():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1: `make test` runs every suite)", pytrace=False)
    pytest.skip(reason)
