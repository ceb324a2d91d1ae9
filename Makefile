# The two commands: `make run` (set up, run the main job on the embedded default,
# serve the UI) and `make test` (lint, type check, the whole suite).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: run test setup lint typecheck pytest engine-wheel engine-alone

$(STAMP): requirements.txt pyproject.toml engine/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e ./engine -e .
	touch $(STAMP)

setup: $(STAMP)

# The embedded default: no DATABASE_URL or broker, so SQLite in var/ and eager tasks.
EMBEDDED := env -u DATABASE_URL -u CELERY_BROKER_URL CRCR_TEST_TIMEOUT=$${CRCR_TEST_TIMEOUT:-30}

run: $(STAMP)
	$(EMBEDDED) $(BIN)/python manage.py migrate --no-input -v 0
	$(EMBEDDED) $(BIN)/python manage.py demo --serve

# The suite runs on the production shape: PostgreSQL and Redis on 127.0.0.1.
test: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/crcr
test: export CELERY_BROKER_URL ?= redis://127.0.0.1:6379/15
test: export DEBUG ?= true
# Workers close their connections after each task, so the test database can be dropped.
test: export DATABASE_CONN_MAX_AGE ?= 0
test: $(STAMP) lint typecheck engine-alone pytest

lint:
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck:
	$(BIN)/mypy

# The engine on its own: its wheel, installed into a fresh virtual environment that holds
# only it and what it declares (torch, pytest, and what torch's test machinery imports),
# then its plugin run on the bundled upstream-style tree (tests/engine/alone.py says how).
ENGINE_WHEEL_DIR := var/engine-wheel
ENGINE_VENV := var/engine-venv
engine-wheel: $(STAMP)
	rm -rf $(ENGINE_WHEEL_DIR)
	$(BIN)/pip wheel -q --no-deps ./engine -w $(ENGINE_WHEEL_DIR)

engine-alone: engine-wheel
	rm -rf $(ENGINE_VENV)
	$(PYTHON) -m venv $(ENGINE_VENV)
	$(ENGINE_VENV)/bin/pip install -q $(ENGINE_WHEEL_DIR)/crcr_reuse-*.whl torch==2.13.0
	cd $(ENGINE_VENV) && bin/python $(CURDIR)/tests/engine/alone.py --alone $(CURDIR)/tests/upstream

# Two pytest-xdist workers (one per core): most of a test's time is spent waiting on
# a subprocess, a worker or the browser, so two at a time halve the wall time. Each has
# its own test database and broker database (tests/conftest.py); a file's tests stay on
# one worker (--dist loadfile), so a module's shared fixture is made once.
PYTEST_WORKERS ?= 2
pytest:
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile
