# Two entry points for a fresh machine (see README): `make run` and `make test`.
# Both create .venv, install the CPU build of torch first (so stable-baselines3 does not pull
# a CUDA build), then the project with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wpb-installed

.PHONY: run test setup clean regimes

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[train,dev]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wpb eval --config configs/eval/paper.yaml --out runs/main/baselines --force --jobs 2
	rm -rf runs/main/maskable_ppo
	$(VENV)/bin/wpb train --algo maskable_ppo --env-kwargs regime=default --out runs/main/maskable_ppo
	$(VENV)/bin/wpb eval --config configs/eval/main.yaml --out runs/main/learned --force --jobs 2
	@cat runs/main/learned/leaderboard.md
	@$(VENV)/bin/wpb compare runs/main/learned --versus sb3:best_model
	@echo "Plots and tables: runs/main/baselines/ (the paper's grid) and runs/main/learned/ (the learned policy)"

# MaskablePPO (configs/train/maskable_ppo.yaml) on each paper regime, then held-out episodes
# (seed 777) at 10 KB on the unprivileged track against the paper's unprivileged baselines and
# change_detector, with paired bootstrap CIs (the README's table of learned vs baselines).
REGIMES := default burst_drift redundancy burst_redundancy
UNPRIVILEGED_BASELINES := change_detector,no_mem,fifo_store_all,uniform_sample,last_kb,merge_aggressive
regimes: $(STAMP)
	@for r in $(REGIMES); do \
	  rm -rf runs/regimes/$$r/model && \
	  $(VENV)/bin/wpb train --algo maskable_ppo --env-kwargs regime=$$r --out runs/regimes/$$r/model && \
	  $(VENV)/bin/wpb eval --agents sb3:runs/regimes/$$r/model/best_model.zip,$(UNPRIVILEGED_BASELINES) \
	    --regimes $$r --budgets 10240 --tracks unprivileged --episodes-per-condition 30 --seed 777 \
	    --out runs/regimes/$$r/eval --force --jobs 2 && \
	  $(VENV)/bin/wpb compare runs/regimes/$$r/eval --versus sb3:best_model || exit 1; \
	done

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs
