# Two commands from a bare machine (python3 + make): `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)  ## the whole fleet in the foreground (embedded Redis and simulator unless configured)
	$(VENV)/bin/antwort up

test: $(STAMP)  ## the whole suite, lint and types included
	$(VENV)/bin/ruff check app gateway workers tests bench
	$(VENV)/bin/mypy app gateway workers
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check app gateway workers tests bench
	$(VENV)/bin/ruff format --check app gateway workers tests bench
	$(VENV)/bin/mypy app gateway workers

bench: $(STAMP)  ## the benchmarks; figures go to bench/results/
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
