# Two commands: `make demo` and `make test`. Both build their own virtualenv.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint screenshots bench bench-ssh bench-prometheus clean fakenvml

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

# The demo gets its own virtualenv with only what the app needs (no test tools), built
# quietly once; `make test`'s .venv is left as it is.
DEMO_VENV  ?= .venv-demo
DEMO_STAMP := $(DEMO_VENV)/.installed

$(DEMO_STAMP): pyproject.toml
	@echo "installing gputop into $(DEMO_VENV) (once)..."
	@$(PYTHON) -m venv $(DEMO_VENV)
	@$(DEMO_VENV)/bin/pip install -q --disable-pip-version-check -e .
	@touch $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	@$(DEMO_VENV)/bin/gputop --demo

# gputop's own fake libnvidia-ml.so.1 (tests/fakenvml/README.md): tests load it through the
# real pynvml.  Written to a temporary name first, so a test never loads half a library.
FAKENVML := build/fakenvml/libnvidia-ml.so.1

$(FAKENVML): tests/fakenvml/fakenvml.c
	@mkdir -p $(@D)
	$(CC) -std=gnu11 -O2 -Wall -Wextra -fPIC -shared -fvisibility=hidden \
		-Wl,-soname,libnvidia-ml.so.1 -o $@.$$$$.tmp $< -lpthread -lm && mv -f $@.$$$$.tmp $@

fakenvml: $(FAKENVML)

test: $(STAMP) $(FAKENVML)
	@bash scripts/ensure-sshd.sh
	@bash scripts/ensure-chromium.sh
	@bash scripts/ensure-prometheus.sh
	@bash scripts/ensure-postgresql.sh
	$(MAKE) --no-print-directory lint
	@# --durations: CI's log names the slowest tests (the suite has 15 minutes on 2 cores)
	$(BIN)/python -m pytest -q -rfEs --durations=30

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
	$(BIN)/python bench/bench_tick.py
	$(BIN)/python bench/bench_rss.py
	$(BIN)/python bench/bench_mig.py

# `gputop serve` scrape latency and CPU; `--prometheus` at 1,000 hosts (a real Prometheus).
bench-prometheus: $(STAMP)
	$(BIN)/python bench/bench_prometheus.py
	$(BIN)/python bench/bench_prometheus_scale.py

# Starts real sshd daemons on 127.0.0.x (root, openssh-server installed).
bench-ssh: $(STAMP)
	$(BIN)/python bench/bench_ssh.py

# gputop next to nvitop on gputop's fake driver; nvitop goes into its own venv
# (BENCH_VENV, default .venv-nvitop), never into gputop's dependencies.
.PHONY: bench-nvitop
bench-nvitop: $(STAMP)
	$(BIN)/python bench/bench_vs_nvitop.py --setup
	$(BIN)/python bench/bench_vs_nvitop.py --write-readme

clean:
	rm -rf $(VENV) $(DEMO_VENV) build *.egg-info
