# Two commands from a bare machine (python3 + make): `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint bench chaos clean codex ai-sdk

EXAMPLE_PLUGIN := examples/antwort-example-plugin
# Codex CLI for its end-to-end test (tests/e2e/test_codex.py), from the npm registry, pinned.
CODEX_VERSION := 0.171.0
CODEX := $(VENV)/node/node_modules/.bin/codex
CODEX_STAMP := $(VENV)/node/.codex-$(CODEX_VERSION)
# The Vercel AI SDK's OpenAI provider for its end-to-end test (tests/e2e/test_ai_sdk.py), pinned.
AI_SDK_VERSION := 7.0.185
AI_SDK_OPENAI_VERSION := 4.0.126
AI_SDK_STAMP := $(VENV)/node/.ai-sdk-$(AI_SDK_VERSION)-$(AI_SDK_OPENAI_VERSION)

$(STAMP): pyproject.toml requirements.lock $(EXAMPLE_PLUGIN)/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	# the example internal-tool plugin (antwort.tools entry point); the e2e suite calls it
	$(PY) -m pip install -q --no-deps -e $(EXAMPLE_PLUGIN)
	touch $(STAMP)

$(CODEX_STAMP):
	npm install --silent --no-audit --no-fund --prefix $(VENV)/node @openai/codex@$(CODEX_VERSION)
	touch $(CODEX_STAMP)

codex: $(CODEX_STAMP)  ## Codex CLI, project-local (.venv/node), for its end-to-end test

$(AI_SDK_STAMP):
	npm install --silent --no-audit --no-fund --save-exact --prefix $(VENV)/node ai@$(AI_SDK_VERSION) @ai-sdk/openai@$(AI_SDK_OPENAI_VERSION)
	touch $(AI_SDK_STAMP)

ai-sdk: $(AI_SDK_STAMP)  ## the Vercel AI SDK, project-local (.venv/node), for its end-to-end test

run: $(STAMP)  ## the whole fleet in the foreground (embedded Redis and simulator unless configured)
	$(VENV)/bin/antwort up

test: $(STAMP) $(CODEX_STAMP) $(AI_SDK_STAMP)  ## the whole suite, lint and types included
	$(VENV)/bin/ruff check app broker gateway workers programs tests bench examples
	$(VENV)/bin/mypy app broker gateway workers programs examples/mcp_server.py examples/antwort-example-plugin/src
	$(PY) -m pytest
	# the end-to-end suite again with the speed-ups off (Celery's send_task, httpx's transport,
	# redis-py's Python parser)
	$(PY) -m pytest -q tests/e2e --speedups=off
	$(PY) -m pytest -q $(EXAMPLE_PLUGIN)/tests

lint: $(STAMP)
	$(VENV)/bin/ruff check app broker gateway workers programs tests bench examples
	$(VENV)/bin/ruff format --check app broker gateway workers programs tests bench examples
	$(VENV)/bin/mypy app broker gateway workers programs examples/mcp_server.py examples/antwort-example-plugin/src

bench: $(STAMP)  ## the benchmarks; figures go to bench/results/
	$(PY) -m bench.run

chaos: $(STAMP)  ## every chaos scenario N=20 times; the table goes to bench/results/chaos.md
	$(PY) -m bench.chaos --runs $(or $(N),20)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
