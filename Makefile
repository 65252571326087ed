# chmv: two commands on a fresh machine (Python 3.11+, Java 17+):
#   make demo   - venv, install, deploy the example DDL into the embedded engine, load data, start the UI
#   make test   - venv, install, lint and format check, the import-layer contracts, the type checker, the test suite
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export CHMV_STATE_DIR ?= $(CURDIR)/.chmv
export DAGSTER_HOME ?= $(CHMV_STATE_DIR)/dagster_home
export PYSPARK_PYTHON := $(CURDIR)/$(BIN)/python
export PYSPARK_DRIVER_PYTHON := $(CURDIR)/$(BIN)/python
export SPARK_LOCAL_IP := 127.0.0.1
export DAGSTER_DISABLE_TELEMETRY := 1

.PHONY: demo test install lint bench clean chromium

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

install: $(BIN)/.installed

demo: install
	mkdir -p $(DAGSTER_HOME)
	cp examples/dagster.yaml $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/chmv load-demo --ddl-dir examples/ddl --landing-dir $(CHMV_STATE_DIR)/landing
	$(BIN)/dagster dev -w workspace.yaml -h 127.0.0.1 -p 3000

# Three workers on two cores, one test file each at a time (a module's `dagster dev` or Spark session stays in its
# worker): the suite waits on daemons (the backfill daemon ticks every 30 s), Spark and dagster dev as much as it
# computes, so a third worker computes while two wait.
# Modules go out longest first (their `worker_seconds` mark, tests/conftest.py), not xdist's most-tests-first,
# which left the longest modules (a `dagster dev` each) to run alone at the end.
# mypy (~20 s cold) runs beside the suite's first minute (collection and the first modules' set-up mostly wait);
# its verdict fails the target as any other check's would.
test: install chromium
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/mypy > .mypy.out 2>&1 & mypy=$$!; \
	CHMV_REQUIRE_BROWSER=1 $(BIN)/pytest -n 3 --dist loadfile --no-loadscope-reorder; tests=$$?; \
	wait $$mypy; checked=$$?; cat .mypy.out; rm -f .mypy.out; \
	[ $$tests = 0 ] && [ $$checked = 0 ]

# The browser tests drive the system Chromium (Playwright cannot download browsers here): install it when
# missing and running as root. Under `make test` and in CI (CI set) a missing Chromium fails the browser test
# (tests/scenarios/test_ui.py), naming what to install; a bare pytest run skips it and says why.
chromium:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; fi

lint: install
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: install
	for b in benchmarks/bench_*.py; do $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(CHMV_STATE_DIR)
