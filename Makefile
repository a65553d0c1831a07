# Two commands: `make demo` and `make test`. Both build their own virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint screenshots bench bench-ssh clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gputop --demo

test: $(STAMP)
	@bash scripts/ensure-sshd.sh
	$(MAKE) --no-print-directory lint
	$(BIN)/python -m pytest -q

# Style, types, and the layer contracts of pyproject.toml ([tool.importlinter]).
lint: $(STAMP)
	$(BIN)/ruff check gputop tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

screenshots: $(STAMP)
	$(BIN)/gputop --screenshot screenshots

# Benchmarks print tables; run by hand, never part of `make test`.
bench: $(STAMP)
	$(BIN)/python bench/bench_once.py
	$(BIN)/python bench/bench_collector.py
	$(BIN)/python bench/health_rules.py
	$(BIN)/python bench/orphans.py
	$(BIN)/python bench/bench_ui.py
	$(BIN)/python bench/bench_mig.py

# Starts real sshd daemons on 127.0.0.x (root, openssh-server installed).
bench-ssh: $(STAMP)
	$(BIN)/python bench/bench_ssh.py

clean:
	rm -rf $(VENV) build *.egg-info
