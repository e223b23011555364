# Two commands from a bare machine (python3 + make): `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench clean

EXAMPLE_PLUGIN := examples/antwort-example-plugin

$(STAMP): pyproject.toml requirements.lock $(EXAMPLE_PLUGIN)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	# the example internal-tool plugin (antwort.tools entry point); the e2e suite calls it
	$(PY) -m pip install -q --no-deps -e $(EXAMPLE_PLUGIN)
	touch $(STAMP)

run: $(STAMP)  ## the whole fleet in the foreground (embedded Redis and simulator unless configured)
	$(VENV)/bin/antwort up

test: $(STAMP)  ## the whole suite, lint and types included
	$(VENV)/bin/ruff check app gateway workers programs tests bench examples
	$(VENV)/bin/mypy app gateway workers programs examples/mcp_server.py examples/antwort-example-plugin/src
	$(PY) -m pytest
	$(PY) -m pytest -q $(EXAMPLE_PLUGIN)/tests

lint: $(STAMP)
	$(VENV)/bin/ruff check app gateway workers programs tests bench examples
	$(VENV)/bin/ruff format --check app gateway workers programs tests bench examples
	$(VENV)/bin/mypy app gateway workers programs examples/mcp_server.py examples/antwort-example-plugin/src

bench: $(STAMP)  ## the benchmarks; figures go to bench/results/
	$(PY) -m bench.run

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
