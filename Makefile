# Two entry points for a fresh machine (see README): `make run` and `make test`.
# Both create .venv, install the CPU build of torch first (so stable-baselines3 does not pull
# a CUDA build), then the project with its extras. PufferLib's wheel pins torch 2.9.0; its
# Gymnasium emulation, which the tests drive the env through, needs only numpy and gymnasium,
# so it is installed without its dependencies.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.wpb-installed

.PHONY: run test setup clean regimes learned

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[train,dev,offline,scale,interop,rllib,stress,multiagent]'
	$(PY) -m pip install --quiet --no-deps pufferlib-core==3.0.23
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wpb eval --config configs/eval/paper.yaml --out runs/main/baselines --force --jobs 2
	rm -rf runs/main/maskable_ppo.new
	$(VENV)/bin/wpb train --algo maskable_ppo --env-kwargs regime=default --out runs/main/maskable_ppo.new
	rm -rf runs/main/maskable_ppo && mv runs/main/maskable_ppo.new runs/main/maskable_ppo
	$(VENV)/bin/wpb eval --config configs/eval/main.yaml --out runs/main/learned --force --jobs 2
	@cat runs/main/learned/leaderboard.md
	@$(VENV)/bin/wpb compare runs/main/learned --versus sb3:best_model
	@echo "Plots and tables: runs/main/baselines/ (the paper's grid) and runs/main/learned/ (the learned policy)"

# MaskablePPO (agents/sb3/recipes/maskable_ppo.yaml) on each paper regime, then held-out episodes
# (seed 777) at 10 KB on the unprivileged track against the paper's unprivileged baselines and
# change_detector, with paired bootstrap CIs (the README's table of learned vs baselines).
REGIMES := default burst_drift redundancy burst_redundancy
UNPRIVILEGED_BASELINES := change_detector,no_mem,fifo_store_all,uniform_sample,last_kb,merge_aggressive
regimes: $(STAMP)
	@for r in $(REGIMES); do \
	  rm -rf runs/regimes/$$r/model.new && \
	  $(VENV)/bin/wpb train --algo maskable_ppo --env-kwargs regime=$$r --out runs/regimes/$$r/model.new && \
	  rm -rf runs/regimes/$$r/model && mv runs/regimes/$$r/model.new runs/regimes/$$r/model && \
	  $(VENV)/bin/wpb eval --agents sb3:runs/regimes/$$r/model/best_model.zip,$(UNPRIVILEGED_BASELINES) \
	    --regimes $$r --budgets 10240 --tracks unprivileged --episodes-per-condition 30 --seed 777 \
	    --out runs/regimes/$$r/eval --force --jobs 2 && \
	  $(VENV)/bin/wpb compare runs/regimes/$$r/eval --versus sb3:best_model || exit 1; \
	done

# Each target trains into NAME.new and replaces NAME only once the new result is complete: an
# interrupted or failed run leaves the previous result as it was.
# Learned agents (3 training seeds each) against breaking_detector and the best privileged
# baseline where eviction matters, and on real drift: docs/learned-agents.md's table.
# MaskablePPO uses its shipped recipe (imitation, then PPO); the bandit learners their defaults.
# Held out: generated seed 777 (training used seeds 0-2 and their validation seeds), and the
# later period of each API's history. APIDRIFT: the folder of the change-event logs (data/apidrift,
# see data/README.md).
LEARNED_REGIMES := default burst_drift redundancy burst_redundancy breaking reverts noisy_priority mixed_sizes contract_mix
REAL_SOURCES := stripe twilio
SEEDS := 0 1 2
APIDRIFT ?= data/apidrift
STRIPE_WINDOWS := train=..2019-06-20,valid=2019-06-21..2020-04-13,heldout=2020-04-14..
TWILIO_WINDOWS := train=..2022-06-28,valid=2022-06-29..2023-02-01,heldout=2023-02-02..
WPB := $(VENV)/bin/wpb
# The agents of one regime's evaluation ($$1: its run folder).
LEARNED_AGENTS = $$(for s in $(SEEDS); do printf 'mppo_s%s=sb3:%s/seed%s/best_model.zip,eg_s%s=epsilon_greedy:%s/epsilon_greedy/seed%s/learner.json,ucb_s%s=bandit_ucb:%s/bandit_ucb/seed%s/learner.json,' $$s $$1 $$s $$s $$1 $$s $$s $$1 $$s; done)breaking_detector,change_detector,priority_threshold,priority_greedy
LEARNED_GROUPS := $(foreach a,mppo eg ucb,--learned $(a)=$(a)_s0,$(a)_s1,$(a)_s2)
learned: $(STAMP)
	@set -e; agents() { echo "$(LEARNED_AGENTS)"; }; \
	for r in $(LEARNED_REGIMES); do \
	  d=runs/learned/$$r.new; rm -rf $$d; \
	  for s in $(SEEDS); do \
	    $(WPB) train --algo maskable_ppo --env-kwargs regime=$$r --seed $$s --out $$d/seed$$s --quiet; \
	    for a in epsilon_greedy bandit_ucb; do \
	      $(WPB) train --algo $$a --env-kwargs regime=$$r --seed $$s --out $$d/$$a/seed$$s --quiet; done; \
	  done; \
	  $(WPB) eval --agents $$(agents $$d) --regimes $$r --budgets 10KB --tracks unprivileged,privileged \
	    --episodes-per-condition 30 --seed 777 --out $$d/eval --force --jobs 2 --quiet; \
	  rm -rf runs/learned/$$r && mv $$d runs/learned/$$r; \
	done; \
	for src in $(REAL_SOURCES); do \
	  w=$$([ $$src = stripe ] && echo "$(STRIPE_WINDOWS)" || echo "$(TWILIO_WINDOWS)"); \
	  $(WPB) episodes from-events $(APIDRIFT)/$${src}_snapshots.jsonl --source $$src --length 100 \
	    --windows $$w --out runs/real/$$src --force > /dev/null; \
	  $(WPB) episodes from-events $(APIDRIFT)/$${src}_snapshots.jsonl --source $$src --length 100 --stride 10 \
	    --windows $$w --out runs/real/$${src}_stride10 --force > /dev/null; \
	  d=runs/learned/real_$$src.new; e=runs/real/$${src}_stride10; rm -rf $$d; \
	  for s in $(SEEDS); do \
	    $(WPB) train --algo maskable_ppo --env-kwargs episodes=$$e/train.jsonl regime=real:$$src \
	      --eval-episodes $$e/valid.jsonl --seed $$s --out $$d/seed$$s --quiet; \
	    for a in epsilon_greedy bandit_ucb; do \
	      $(WPB) train --algo $$a --env-kwargs episodes=$$e/train.jsonl regime=real:$$src \
	        --eval-episodes $$e/valid.jsonl --seed $$s --out $$d/$$a/seed$$s --quiet; done; \
	  done; \
	  $(WPB) eval --agents $$(agents $$d) --episodes runs/real/$$src/heldout.jsonl --budgets 10KB \
	    --tracks unprivileged,privileged --out $$d/eval --force --jobs 2 --quiet; \
	  rm -rf runs/learned/real_$$src && mv $$d runs/learned/real_$$src; \
	done; \
	$(WPB) seeds $(foreach r,$(LEARNED_REGIMES),runs/learned/$(r)/eval) $(foreach s,$(REAL_SOURCES),runs/learned/real_$(s)/eval) \
	  $(LEARNED_GROUPS) --out runs/learned/table.md

# The suite's tests are independent: one process per core (pytest-xdist) halves it on 2 cores.
test: $(STAMP)
	$(PY) -m pytest -q -n auto

clean:
	rm -rf $(VENV) runs
