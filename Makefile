# BlockX Worker. `make serve` builds and runs a worker (the dev profile: the example functions);
# `make check` is the test command for an edit (no root, no apt, no image: minutes); `make test` builds
# and runs every test, as CI does.
PY      ?= python3
VENV    := .venv
VPY     := $(VENV)/bin/python
PIP     := $(VPY) -m pip
STAMP   := $(VENV)/.installed
PYTEST  := $(VPY) -m pytest
ARGS    ?=

.PHONY: build dist image image-base podman kubernetes-validate serve check check-compiled check-twins test typecheck test-compiled test-twins etcd iproute2 redis bubblewrap runc postgres prometheus tmux chromium ganache bench bench-instructions bench-peers bench-micro bench-micro-ci clean

build: $(STAMP)
	$(VPY) setup.py -q build_ext --inplace
	$(VPY) -c "import blockx._fast as f, blockx.worker.v1.worker_pb2" 

$(STAMP): pyproject.toml setup.py
	test -x $(VPY) || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "Cython==3.3.1" "grpcio-tools==1.85.1"
	$(PIP) install -q --no-build-isolation -e ".[worker,dev]"
	touch $(STAMP)

# The sdist, then a binary wheel built from it (so the sdist is known to carry
# what a build needs), into dist/; with this venv's setuptools, Cython and
# grpcio-tools (the versions pyproject.toml pins) instead of fresh copies.
dist: $(STAMP)
	rm -rf dist
	$(VPY) -m build --no-isolation --outdir dist .
	@ls -l dist

# $(call install_missing,CHECK,INSTALL,WHAT): when the shell test CHECK fails (the tool is not
# there), run the command INSTALL, then CHECK again; still failing, stop naming WHAT (an INSTALL
# that fails, say apt-get without root, shows its own error and then this one). The one recipe
# of every test dependency target below; $(call apt_install,CHECK,PACKAGES,WHAT) is it with
# Debian's installer (needs root) for the Debian PACKAGES.
define install_missing
@{ $(1) ; } >/dev/null 2>&1 || $(2) || true
@{ $(1) ; } >/dev/null 2>&1 || { echo "$(3) is missing and could not be installed" >&2; exit 1; }
endef
apt_install = $(call install_missing,$(1),(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null),$(3))

# ---- the OCI image (Containerfile). podman reads deploy/image/containers.conf (runc,
# no default ulimits, cgroupfs: what a machine that is itself a container needs).
# BASE is the base image; left empty, a local Debian base is built once
# (debootstrap from the Debian archive, then `podman import`) and reused.
comma := ,
export CONTAINERS_CONF := $(CURDIR)/deploy/image/containers.conf
IMAGE      ?= localhost/blockx-worker:latest
LOCAL_BASE := localhost/blockx-debian-base:bookworm
BASE       ?=
# A CA bundle pip inside the build trusts (given as a build secret, never stored in the image).
PIP_CA     ?= $(PIP_CERT)
podman:
	$(call apt_install,command -v podman && command -v runc && command -v debootstrap,podman runc debootstrap,podman$(comma) runc or debootstrap)

image-base: podman
	@test -n "$(BASE)" || sh deploy/image/debian-base.sh $(LOCAL_BASE)

image: image-base
	podman build --format docker --network host $(if $(PIP_CA),--secret id=pip-ca$(comma)src=$(PIP_CA)) --build-arg BASE=$(or $(BASE),$(LOCAL_BASE)) -t $(IMAGE) -f Containerfile .
	@podman image inspect $(IMAGE) --format 'image {{.RepoTags}} {{.Size}} bytes'

# kubernetes-validate checks deploy/kubernetes/ against the Kubernetes API schemas it ships (tests/unit/deploy).
kubernetes-validate: $(STAMP)
	$(call install_missing,$(VPY) -c "import kubernetes_validate",$(PIP) install -q "kubernetes-validate>=1.30",kubernetes-validate)
# ---- end the OCI image ----

# The developer's worker: the dev profile (the shipped example functions, the dev builders and
# writers, the devstub IO backend), so the README's first `blockx submit` runs. `blockx serve`
# itself keeps the production default (block: no functions until configured); ARGS="--profile
# block" or BLOCKX_PROFILE=block gives that one here.
serve: build
	BLOCKX_PROFILE=$${BLOCKX_PROFILE:-dev} $(VENV)/bin/blockx serve $(ARGS)

# etcd-server is a test dependency of the e2e suite (a real etcd, started by the tests).
etcd:
	$(call apt_install,command -v etcd,etcd-server,etcd)

# iproute2 (`ip`) builds the network namespaces, bridge and veth pairs of the
# multi-host fault tests (tests/support/netns.py); they need root.
iproute2:
	$(call apt_install,command -v ip,iproute2,iproute2 (ip))

# redis-server is a test dependency of the FUNCTIONS_SOURCE=redis suites (a real Redis,
# started by the tests on a free loopback port, without persistence).
redis:
	$(call apt_install,command -v redis-server,redis-server,redis-server)

# bubblewrap (bwrap) runs executors in EXECUTOR_SPAWN_MODE=sandbox; the sandbox suites need it.
bubblewrap:
	$(call apt_install,command -v bwrap,bubblewrap,bubblewrap (bwrap))

# runc runs executors in EXECUTOR_SANDBOX_RUNTIME=oci (an OCI container per executor); the sandbox suites need it.
runc:
	$(call apt_install,command -v runc,runc,runc)

# tmux runs `blockx top` and the progress bar on a real terminal in the e2e suite (read with capture-pane).
tmux:
	$(call apt_install,command -v tmux,tmux,tmux)

# chromium and chromium-driver (Debian's) run the dashboard's browser tests (tests/e2e/test_dashboard.py),
# headless; Selenium is given both paths, so it never downloads a browser or a driver.
chromium:
	$(call apt_install,command -v chromium && command -v chromedriver,chromium chromium-driver,chromium or chromium-driver)

# PostgreSQL (Debian's initdb + pg_ctl) is a test dependency of the data-plane
# suites: they start a throwaway cluster of their own on a free loopback port.
# Debian keeps initdb off PATH, under $(PG_LIB)/N/bin (tests/support/postgres.py looks there too).
PG_LIB ?= /usr/lib/postgresql
postgres:
	$(call apt_install,ls $(PG_LIB)/*/bin/initdb || command -v initdb,postgresql,PostgreSQL)

# promtool (Debian's prometheus package) checks and unit-tests
# deploy/prometheus/alerts.yml and the dashboard's PromQL.
prometheus:
	$(call apt_install,command -v promtool,prometheus,promtool (Debian package prometheus))

# ganache (npm) is the Ethereum JSON-RPC node the rpc IO backend's suites and `make bench` start;
# it goes into the project's .npm-tools/ (gitignored), never a global install.
GANACHE := .npm-tools/node_modules/.bin/ganache
ganache:
	$(call install_missing,test -x $(GANACHE),npm install --prefix .npm-tools --no-audit --no-fund --silent ganache@7,ganache (npm install ganache@7))

test: build etcd redis bubblewrap runc postgres prometheus tmux chromium ganache iproute2 podman image kubernetes-validate typecheck test-compiled test-twins bench-micro-ci bench-quick

# The test command for an edit: the build, mypy, the unit and integration suites compiled and as
# pure-Python twins, and the micro-benchmark check. No root, no apt, no image, no e2e. An
# integration test whose server binary (etcd, PostgreSQL, Redis, promtool, ...) is not installed
# skips and names the `make` target that installs it; under `make test`, which installs them all,
# REQUIRE_TEST_BINARIES turns any such skip into a failure (tests/support/binaries.py).
# The suites run on every core (pytest-xdist, the dev extra): CHECK_JOBS=1 runs them in one process.
CHECK_JOBS ?= auto
check: build typecheck check-compiled check-twins bench-micro-ci

check-compiled: build
	$(PYTEST) -q -p no:cacheprovider -n $(CHECK_JOBS) tests/unit tests/integration $(ARGS)

check-twins: build
	BLOCKX_NO_EXTENSIONS=1 $(PYTEST) -q -p no:cacheprovider -n $(CHECK_JOBS) tests/unit tests/integration $(ARGS)

# mypy over blockx/ (its settings: [tool.mypy] in pyproject.toml).
typecheck: build
	$(VPY) -m mypy

test-compiled:
	BLOCKX_REQUIRE_TEST_BINARIES=1 $(PYTEST) -q -p no:cacheprovider tests $(ARGS)

# The pure-Python twins of every hot path pass the same unit suites.
test-twins:
	BLOCKX_REQUIRE_TEST_BINARIES=1 BLOCKX_NO_EXTENSIONS=1 $(PYTEST) -q -p no:cacheprovider tests/unit $(ARGS)

bench-micro: build
	$(VPY) -m bench.micro

bench-micro-ci: build
	$(VPY) -m bench.micro --fast --check

bench: build ganache bubblewrap runc
	$(VPY) bench/e2e_load.py $(ARGS)

# Every scenario of `make bench` at small sizes: exits non-zero when any scenario
# fails, so `make test` catches a broken benchmark (the JSON report goes to stdout;
# no $(ARGS): under `make test` they are pytest's).
.PHONY: bench-quick
bench-quick: build ganache bubblewrap runc etcd postgres
	$(VPY) bench/e2e_load.py --quick

# Instructions per call / subcall / IO round trip of the Worker and its executors,
# counted by callgrind: repeatable on a noisy machine, for comparing two builds.
bench-instructions: build
	$(call apt_install,command -v valgrind,valgrind,valgrind)
	$(VPY) bench/instructions.py $(ARGS)

# This Worker beside Ray on trivial one-call jobs (64 in flight, and sequential): jobs/s and the
# serving side's CPU per job, interleaved round by round (bench/peers/main.py). Ray goes into a
# venv of its own, .bench-peers-venv (gitignored), created once; never into the project's venv.
PEERS_VENV  := .bench-peers-venv
RAY_VERSION := 2.60.0
bench-peers: build
	@test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	@$(PEERS_VENV)/bin/python -c "import ray, sys; sys.exit(ray.__version__ != '$(RAY_VERSION)')" 2>/dev/null \
		|| $(PEERS_VENV)/bin/pip install -q "ray==$(RAY_VERSION)"
	$(VPY) bench/bench_peers.py --ray-python $(PEERS_VENV)/bin/python $(ARGS)

# Every build output: setuptools' build/, dist/ and egg-info, the gRPC code generated from proto/,
# and for each directory setup.py compiles (its COMPILED_DIRS) Cython's C, annotation HTML and the
# extension modules. tests/unit/packaging/test_make_clean.py runs it on a tree of such files.
COMPILED_DIRS := blockx/_fast blockx/core/dispatch
clean:
	rm -rf build dist *.egg-info blockx/worker/v1/*_pb2*.py*
	rm -f $(foreach d,$(COMPILED_DIRS),$(d)/*.c $(d)/*.so $(d)/*.html)
