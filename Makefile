# sparkindex: every target creates .venv and installs on first use, and checks for Java 17.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export SPARK_LOCAL_IP ?= 127.0.0.1
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.PHONY: demo test bench chaos lint java venv clean

java:
	@if ! java -version 2>&1 | grep -q 'version "17'; then \
	  echo "installing Java 17 (openjdk-17-jre-headless)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless; \
	fi

$(STAMP): pyproject.toml
	@# mysqlclient (the mysql extra's driver, chosen by measurement) compiles against these.
	@if ! pkg-config --exists libmariadb 2>/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pkg-config libmariadb-dev; \
	fi
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[all,dev]'  # every extra: the tests use them all
	touch $(STAMP)

venv: $(STAMP)

demo: java venv
	$(BIN)/sparkindex demo $(if $(ROWS),--rows $(ROWS),)

# Two phases: TEST_WORKERS processes share the tests not marked serial (a file stays on one worker:
# module fixtures start private servers once), then the serial ones run alone. Both phases always
# run; the worse exit code is make's. Three workers: the two cores are busy all through the first
# phase (measured), and a fourth worker made it slower, not faster.
TEST_WORKERS ?= 3
test: java venv
	bash scripts/test-services.sh
	@rc=0; \
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not serial" || rc=$$?; \
	$(BIN)/pytest -q -p no:xdist -m serial || rc=$$?; \
	exit $$rc

bench: java venv
	bash scripts/test-services.sh
	$(BIN)/python -m bench.run

# The seeded fault campaign (chaos/): CHAOS_TRIALS trials (default 30) from CHAOS_SEED (default 1).
chaos: java venv
	bash scripts/test-services.sh
	$(BIN)/python -m chaos

lint: venv
	$(BIN)/ruff check src tests bench chaos
	$(BIN)/mypy
	$(BIN)/lint-imports

clean:
	rm -rf demo .sparkindex .pytest_cache .mypy_cache .ruff_cache
