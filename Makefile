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
	$(VENV)/bin/wpb freeze --regimes default,burst_drift,redundancy,burst_redundancy \
	    --lengths 100,200,1000,10000 --episodes 10 --seed 0 --out runs/frozen --force
	$(VENV)/bin/wpb inspect runs/frozen --budgets 1024,10240,102400,1048576

test: $(STAMP)
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) runs
