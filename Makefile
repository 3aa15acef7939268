# Two entry points for a fresh machine (see README): `make run` and `make test`.
# Both create .venv, install the CPU build of torch first (so stable-baselines3 does not pull
# a CUDA build), then the project with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wpb-installed

.PHONY: run test setup clean

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

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs
