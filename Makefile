# gpuslo developer commands. `make test` is what CI runs (after scripts/install.sh).
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: install run test lint bench-quick dashboards vendor-echarts

install:  ## system packages (as root) and .venv with the project and its dev tools
	./scripts/install.sh

run: install  ## serve on SQLite at var/gpuslo.db with rules/ on http://127.0.0.1:8080
	$(BIN)/gpuslo serve

lint:  ## ruff over the whole tree, then mypy --strict over engine/ (scripts/typecheck.sh)
	$(BIN)/ruff check .
	./scripts/typecheck.sh

dashboards:  ## regenerate the Grafana dashboards in dashboards/ from dashboards/generate.py
	$(BIN)/python dashboards/generate.py

vendor-echarts:  ## refresh web/static/vendor/echarts from the npm registry (version pinned in the script)
	./scripts/vendor-echarts.sh

# The whole suite: storage and API tests run on SQLite and on PostgreSQL (127.0.0.1:5432, or
# $$GPUSLO_TEST_POSTGRES_URL), and the browser test drives Debian's headless Chromium.
test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# Every benchmark with GPUSLO_BENCH_QUICK=1 (each shrinks its sizes when it is set); each prints ratios against a
# baseline it measures in the same run.
bench-quick:
	@set -e; found=0; for bench in bench/*.py; do \
		[ -e "$$bench" ] || continue; found=1; \
		echo "== $$bench"; GPUSLO_BENCH_QUICK=1 $(BIN)/python "$$bench"; \
	done; [ $$found = 1 ] || echo "no benchmarks in bench/"
