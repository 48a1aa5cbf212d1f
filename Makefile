# make demo  -- set everything up, then run the example DAG end to end (twice) and verify the data
# make test  -- set everything up (starting PostgreSQL and MariaDB when down), then run the whole test suite
# make bench -- set everything up, then print every benchmark as a ratio against its baseline, and chart them (bench/chart.py)
# make screenshots -- the browser tests on a real Airflow, saving their screenshots of the UI into docs/images
# make airflow -- set everything up, then run Airflow with the example DAGs on 127.0.0.1 until Ctrl-C (try them in the UI)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STATE  := .copycat
export SSL_CERT_FILE ?= $(wildcard /etc/ssl/certs/ca-certificates.crt)
ENV    := . $(STATE)/java.env && export PATH="$(CURDIR)/$(BIN):$$PATH" PYSPARK_PYTHON="$(CURDIR)/$(BIN)/python"

.PHONY: setup bytecode databases browser age demo airflow airflow-clean test bench screenshots lint clean

setup: $(VENV)/.installed $(STATE)/java.env bytecode

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip -q
	$(BIN)/python -m pip install -q --disable-pip-version-check uv
	cd $(CURDIR) && $(BIN)/uv pip install --python $(BIN)/python -q --compile-bytecode -e '.[embedded,test,jdbc,cdc,distcp]'
	$(BIN)/python -c "import pyspark; v = pyspark.__version__; assert v.startswith('4.'), v; print('pyspark', v)"
	touch $@

# Bytecode of the project's own modules, written ahead: with PYTHONDONTWRITEBYTECODE set (as on some CI machines)
# every process -- Airflow's task processes, Spark's Python workers, the tests' subprocesses -- would otherwise compile
# every module it imports, each time (the installed packages' bytecode is written by --compile-bytecode above).
bytecode: $(VENV)/.installed
	$(BIN)/python -m compileall -q -j 0 airflow_copycat spark_apps dags tests scripts bench >/dev/null

$(STATE)/java.env: $(VENV)/.installed scripts/find_java.sh
	mkdir -p $(STATE)
	scripts/find_java.sh $(BIN)/python $(STATE) > $@.tmp && mv $@.tmp $@
	cat $@

demo: setup
	$(ENV) && $(BIN)/python scripts/demo.py

# The broker, a Spark Connect server and Airflow's api-server, scheduler, dag-processor and triggerer with the
# example DAGs, in the foreground; prints the UI's address and login; Ctrl-C stops everything. State (Airflow's
# database, task logs, the shop database) is kept in $(STATE)/airflow between starts; airflow-clean removes it.
# AIRFLOW_ARGS="--port 8081" picks another port.
airflow: setup
	$(ENV) && $(BIN)/python scripts/airflow_stack.py $(AIRFLOW_ARGS)

airflow-clean:
	rm -rf $(STATE)/airflow

# PostgreSQL on 127.0.0.1:5432 and MariaDB on 127.0.0.1:3306 for the database tests: started when down,
# installed from Debian's packages when missing (as root); fails loudly when neither is possible.
databases:
	bash scripts/ensure_databases.sh

# Debian's Chromium at /usr/bin/chromium for the browser test (tests/e2e/test_airflow_ui.py, driven by Playwright):
# installed with apt-get when missing (as root); fails loudly when that is not possible. Never a downloaded browser.
browser:
	bash scripts/ensure_browser.sh

# The age CLI (Debian's age package) for the Distcp encryption interoperability tests (tests/distcp/test_age.py):
# installed with apt-get when missing (as root); fails loudly when that is not possible.
age:
	bash scripts/ensure_age.sh

# Three test processes (pytest-xdist), whole files per process, the longest first (tests/conftest.py): each
# process has its own broker, Spark and Spark Connect server. Three on two cores because much of the suite waits
# (Airflow's scheduler loop, task processes starting, retries, brokers and servers starting): with two processes the
# cores were idle about a third of the time and the suite took 11 min 46 s here; with three, 9 min 47 s (18 % idle).
# TEST_PROCESSES=0 runs everything in this process.
TEST_PROCESSES ?= 3
test: setup databases browser age
	$(ENV) && $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# Every script's output (stdout and stderr) also goes to $(BENCH_LOG), one run per file; bench/chart.py then writes its
# figures to bench/results.json and the chart docs/images/bench.svg (commit both to publish a run). Stops at the first
# benchmark that fails, charting nothing. A chart of a log kept from before: $(BIN)/python bench/chart.py --from-log LOG
BENCH_LOG := $(STATE)/bench.log
bench: setup
	$(ENV) && $(BIN)/python bench/chart.py --start-log $(BENCH_LOG) && \
	for b in bench/bench_*.py; do \
	  echo "bench-script: $$b" >> $(BENCH_LOG); \
	  { $(BIN)/python $$b 2>&1; echo $$? > $(BENCH_LOG).status; } | tee -a $(BENCH_LOG); \
	  test "$$(cat $(BENCH_LOG).status)" = 0 || { echo "$$b failed: see $(BENCH_LOG)"; exit 1; }; \
	done && \
	$(BIN)/python bench/chart.py --from-log $(BENCH_LOG)

# Screenshots of the Airflow UI for the docs (docs/images/*.png), taken by the browser tests of
# tests/e2e/test_airflow_ui.py on a real Airflow: a connector's task group in the graph view, a run's summary XCom,
# the backfill dialog, the offsets page. make test takes them too, into each test's temporary directory.
screenshots: setup databases browser
	$(ENV) && COPYCAT_SCREENSHOTS="$(CURDIR)/docs/images" $(BIN)/python -m pytest -p no:cacheprovider \
	  tests/e2e/test_airflow_ui.py -k "not rest_api" $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check airflow_copycat spark_apps dags tests bench scripts

clean:
	rm -rf $(STATE) $(VENV) build *.egg-info

# The whole stack in Docker (docker/compose.yaml): Airflow 3 with the example DAGs, a Spark master, two workers and a
# Spark Connect server, Kafka, a Schema Registry, PostgreSQL and MariaDB. The UI: http://localhost:8080, user admin,
# password admin. Needs Docker with the compose plugin; compose-down keeps the volumes (add -v to drop them).
COMPOSE := docker compose -f docker/compose.yaml
.PHONY: compose-up compose-down
compose-up:
	$(COMPOSE) up -d --build

compose-down:
	$(COMPOSE) down
