"""The Makefile installs the test dependencies with one recipe: each target
(`make etcd`, `make chromium`, `make ganache`, ...) is one call of it, so a fix
to how a missing tool is found, installed and reported is made once.

The recipe is run for real (make, a copy of the repo's Makefile) with a PATH
of its own: a directory holding only what the case puts there. `apt-get` and
`npm` on that PATH are small scripts that write down how they were called and
then do what the case says (put the tool in place, or fail), since the real
ones need root and the network; what is tested is the Makefile's logic around
them: nothing is installed when the tool is there, the installer is asked for
the right packages when it is not, and a tool still missing afterwards stops
make with a message naming it."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
MAKE = shutil.which("make")

# target: (the tools its check looks for, what the installer is asked for, the name in the error)
TARGETS = {
    "etcd": (["etcd"], "apt-get install -y -qq etcd-server", "etcd"),
    "iproute2": (["ip"], "apt-get install -y -qq iproute2", "iproute2 (ip)"),
    "redis": (["redis-server"], "apt-get install -y -qq redis-server", "redis-server"),
    "bubblewrap": (["bwrap"], "apt-get install -y -qq bubblewrap", "bubblewrap (bwrap)"),
    "runc": (["runc"], "apt-get install -y -qq runc", "runc"),
    "tmux": (["tmux"], "apt-get install -y -qq tmux", "tmux"),
    "chromium": (["chromium", "chromedriver"], "apt-get install -y -qq chromium chromium-driver",
                 "chromium or chromium-driver"),
    "postgres": (["initdb"], "apt-get install -y -qq postgresql", "PostgreSQL"),
    "prometheus": (["promtool"], "apt-get install -y -qq prometheus", "promtool (Debian package prometheus)"),
    "podman": (["podman", "runc", "debootstrap"], "apt-get install -y -qq podman runc debootstrap",
               "podman, runc or debootstrap"),
    "ganache": ([".npm-tools/node_modules/.bin/ganache"], "npm install --prefix .npm-tools", "ganache (npm install ganache@7)"),
}

_INSTALLER = """#!/bin/sh
echo "$(basename "$0") $*" >> "{log}"
[ "$1" = update ] && exit 0
{then}
"""


def _tool(path: pathlib.Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)


# PostgreSQL's check also looks where Debian puts initdb, off PATH: with it installed there, no PATH
# of the test's own makes it missing.


def _run(tmp_path: pathlib.Path, target: str, present: bool, installs: bool):
    tools, _, _ = TARGETS[target]
    work = tmp_path / "tree"
    work.mkdir()
    shutil.copy(ROOT / "Makefile", work / "Makefile")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "installer.log"
    places = [work / t if "/" in t else bin_dir / t for t in tools]
    if present:
        for p in places:
            _tool(p)
    then = " && ".join(f"mkdir -p {p.parent} && printf '#!/bin/sh\\nexit 0\\n' > {p} && chmod 755 {p}"
                       for p in places) if installs else "exit 1"
    for installer in ("apt-get", "npm"):
        (bin_dir / installer).write_text(_INSTALLER.format(log=log, then=then))
        (bin_dir / installer).chmod(0o755)
    for util in ("ls", "mkdir", "chmod", "basename", "printf"):   # what the checks and the scripts above call
        found = shutil.which(util)
        if found:
            os.symlink(found, bin_dir / util)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    # PG_LIB: the postgres check also looks outside PATH; point it into the private tree
    r = subprocess.run([MAKE, "-s", target, f"PG_LIB={tmp_path / 'postgresql'}"], cwd=work, env=env, capture_output=True, text=True, timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    return r, calls




@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_tool_that_is_there_is_not_installed(tmp_path, target):
    r, calls = _run(tmp_path, target, present=True, installs=False)
    assert r.returncode == 0, r.stderr
    assert calls == []


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_missing_tool_is_installed_with_its_packages(tmp_path, target):
    r, calls = _run(tmp_path, target, present=False, installs=True)
    assert r.returncode == 0, r.stderr
    _, asked, _ = TARGETS[target]
    assert any(c.startswith(asked) for c in calls), calls


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_tool_still_missing_stops_make_naming_it(tmp_path, target):
    r, _ = _run(tmp_path, target, present=False, installs=False)
    _, _, what = TARGETS[target]
    assert r.returncode != 0
    assert f"{what} is missing and could not be installed" in r.stderr, r.stderr


def test_the_makefile_holds_the_install_recipe_once():
    make = (ROOT / "Makefile").read_text()
    # the recipe's three parts, each written once: the check-install-check, the apt command, the error
    assert make.count("is missing and could not be installed") == 1, "a second copy of the install recipe"
    assert len(re.findall(r"apt-get install", make)) == 1, "a second apt-get install recipe"
    # and every target above is one call of it
    for target in TARGETS:
        body = re.search(rf"^{re.escape(target)}:[^\n]*\n((?:\t[^\n]*\n)+)", make, re.M)
        assert body, f"no recipe for {target}"
        lines = body.group(1).splitlines()
        assert len(lines) == 1 and re.match(r"\t\$\(call (install_missing|apt_install),", lines[0]), \
            f"{target}'s recipe is not one call of the install recipe: {lines}"
