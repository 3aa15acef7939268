"""Figures the README and docs/ state that code, config files or data decide: each is read from
its page and compared with where it comes from, so that a change to either fails here until the
other follows. A figure that only a long measurement gives stays beside the command that gives
it; those a cheap computation gives (a recipe's steps, a tier's knobs, counts in the change-event
logs, a small evaluation grid) are recomputed here.
"""

from __future__ import annotations

import ast
import csv
import inspect
import itertools
import json
import re
import shlex
from collections import defaultdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

import wpb_gym  # noqa: F401  (registers the ids)
from agents.registry import agent_entry, make_agent
from wpb_gym import episode_costs, generate_episode, make_config
from wpb_gym.cli import main as wpb
from wpb_gym.envs.env import WritePolicyBenchEnv
from wpb_gym.envs.episode_sampler import DEFAULT_REGIME

ROOT = Path(__file__).resolve().parents[2]
NUMBER_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 8: "eight"}


def raw(name: str) -> str:
    return (ROOT / name if name == "README.md" else ROOT / "docs" / name).read_text(encoding="utf-8")


def page(name: str) -> str:
    """README.md or a docs/ page with its whitespace collapsed, so a phrase is found across line breaks."""
    return " ".join(raw(name).split())


def says(name: str, phrase: str) -> None:
    assert phrase in page(name), f"{name} no longer says {phrase!r}"


def table(name: str, header: str, after: str | None = None) -> list[list[str]]:
    """The cells of the first table of ``name`` whose header row starts with ``header`` (after
    the first line holding ``after``, if given)."""
    lines = raw(name).splitlines()
    start = 0 if after is None else next(i for i, line in enumerate(lines) if after in line)
    start = next(i for i in range(start, len(lines)) if lines[i].startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def number(text: str) -> float:
    """A table cell's number: bold, a sign, a Unicode minus, an interval after it are read past."""
    return float(re.match(r"[*]*([+−-]?[0-9.]+)", text.strip()).group(1).replace("−", "-"))


# --------------------------------------------------------------------------- set-up and the env


def test_the_install_pins_the_pages_give_are_the_makefiles():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    (torch,) = re.findall(r"pip install --quiet (torch==[\w.]+)\n", makefile)
    (puffer,) = re.findall(r"pip install --quiet --no-deps (pufferlib-core==[\w.]+)\n", makefile)
    for name in ("README.md", "getting-started.md"):
        says(name, f"Both create `.venv`, install `{torch}` first")
    says("environment.md", f"`pip install --no-deps {puffer}`")


ENV_DEFAULTS = {p.name: p.default for p in inspect.signature(WritePolicyBenchEnv.__init__).parameters.values()}
# None in the signature: the generated episodes' regime and its length.
ENV_DEFAULTS.update(regime=DEFAULT_REGIME, length=make_config(DEFAULT_REGIME).length)


def test_the_environment_pages_arguments_table_gives_each_default():
    rows = table("environment.md", "| argument | default |")
    assert rows
    for name, default, _meaning in rows:
        if name.startswith("`**"):
            continue
        value = ast.literal_eval(default.strip("`"))
        expected = ENV_DEFAULTS[name.strip("`")]
        assert value == expected and type(value) is type(expected), (name, default, expected)


def test_the_pages_describe_the_envs_defaults_as_they_are():
    slots, cost, budget = ENV_DEFAULTS["slots"], ENV_DEFAULTS["expire_cost"], ENV_DEFAULTS["budget_bytes"]
    assert ENV_DEFAULTS["reward"] == "f1" and ENV_DEFAULTS["dense_reward"] is True
    shown = f"dense F1 rewards, {NUMBER_WORDS[slots]} memory slots shown"
    says("README.md", f"{shown}, EXPIRE available at a cost of {cost} each")
    says("README.md", f"# the default regime, {budget // 1024} KB")
    says("getting-started.md", f"{shown} and EXPIRE available at a cost of {cost} each")
    says("environment.md", f"{NUMBER_WORDS[slots]} memory slots shown")
    says("environment.md", f"EXPIRE available at a cost of {cost} each")
    says("environment.md", f"less {cost} for each accepted EXPIRE (`expire_cost`)")
    says("training.md", f"train on the env's defaults ({slots} slots, dense F1, {cost} per EXPIRE)")
    says("learned-agents.md", f"**the defaults** ({slots} slots, dense F1, {cost} per EXPIRE)")
    says("learned-agents.md", f"The rewards with the default cost add up to F1 less {cost} per EXPIRE")


def test_the_observation_and_action_spaces_have_the_sizes_the_environment_page_gives():
    text = page("environment.md")
    (sizes,) = re.findall(
        r"`Box\(0, 1, \((\d+) \+ (\d+) \+ (\d+)K,\), float32\)` \((\d+) at the default K = (\d+), (\d+) at K = 8; "
        r"(\d+) \+ (\d+) \+ (\d+)K on the privileged track\)",
        text,
    )
    step, memory, slot, at_default, default_k, at_8, p_step, p_memory, p_slot = map(int, sizes)
    assert "**Actions** — `Discrete(2 + 2K)`" in text and default_k == ENV_DEFAULTS["slots"]
    assert (at_default, at_8) == (step + memory + slot * default_k, step + memory + slot * 8)
    for k in (1, default_k, 8):
        env = gym.make("WritePolicyBench-v0", slots=k)
        privileged = gym.make("WritePolicyBench-v0", slots=k, track="privileged")
        assert env.observation_space.shape == (step + memory + slot * k,)
        assert privileged.observation_space.shape == (p_step + p_memory + p_slot * k,)
        assert env.action_space.n == 2 + 2 * k


# --------------------------------------------------------------------------- training


def test_the_recipes_are_what_the_pages_say_they_are():
    from agents.sb3.train import DEFAULTS, load_config, recipe_path

    scale = {"k": 1_000, "M": 1_000_000}
    rows = table("learned-agents.md", "| regimes | config | what it does |")
    assert [cell for row in rows for cell in re.findall(r"`([\w:]+)`", row[0])] == [
        "default", "burst_drift", "redundancy", "burst_redundancy", "breaking", "reverts", "contract_mix",
        "noisy_priority", "mixed_sizes", "real:stripe", "real:twilio", "queries_easy", "queries_medium", "queries_hard",
    ]
    for regimes, config, what in rows:
        for regime in re.findall(r"`([\w:]+)`", regimes):
            assert recipe_path("maskable_ppo", regime).name == Path(config.strip("`")).name, regime
            recipe = load_config("maskable_ppo", regime=regime)
            if recipe["query_env"]:  # the query tier's own env, by imitation only
                slots, buckets = re.findall(r"(\d+) slots, words hashed into (\d+) buckets", what)[0]
                assert recipe["env"] == {"slots": int(slots), "word_buckets": int(buckets)}, regime
                assert recipe["timesteps"] == 0 and "imitation only" in what and "`causal_privileged`" in what
                continue
            # Every recipe shows 8 slots and charges nothing per EXPIRE (training.md, learned-agents.md).
            assert recipe["env"]["slots"] == 8 and recipe["env"]["expire_cost"] == 0.0, regime
            assert recipe["hyperparams"]["gamma"] == 1.0 and recipe["env"]["dense_reward"] is True
            if "no RL steps" in what:
                assert recipe["timesteps"] == 0
            else:
                (steps,) = re.findall(r"(\d+)(k|M) steps", what)
                assert recipe["timesteps"] == int(steps[0]) * scale[steps[1]], regime
            if what.startswith("PPO from scratch"):
                assert recipe["imitation"] is None and recipe["env"]["max_expires_per_step"] == 0
            else:
                assert recipe["imitation"]["teacher"] == "breaking_rule"
                assert recipe["env"].get("max_expires_per_step") is None  # EXPIRE available
            if regime.startswith("real:"):
                (net,) = re.findall(r"a (\d+) x (\d+) network, (\d+) imitation rounds \(the teacher's and (\d+) "
                                    r"DAgger rounds\) of (\d+) episodes with counterfactual states", what)
                width, height, all_rounds, rounds, episodes = map(int, net)
                assert recipe["hyperparams"]["policy_kwargs"]["net_arch"] == [width, height]
                assert recipe["imitation"]["rounds"] == rounds == all_rounds - 1
                assert recipe["imitation"]["episodes"] == episodes
                says("learned-agents.md", f"(`counterfactuals: {recipe['imitation']['counterfactuals']}`)")
                says("learned-agents.md", f"(`timesteps: {recipe['timesteps']}`)")

    contract = load_config("maskable_ppo", regime="breaking")
    rounds, episodes = contract["imitation"]["rounds"], contract["imitation"]["episodes"]
    length = make_config("breaking").length
    says("learned-agents.md", f"{NUMBER_WORDS[rounds + 1]} rounds of {episodes} episodes of {length} steps")
    says("learned-agents.md", f"Round 0 follows the teacher; rounds 1-{rounds} follow the student")
    h = contract["hyperparams"]
    assert (h["learning_rate"], h["clip_range"], h["ent_coef"]) == (1e-4, 0.1, 0.0)
    says("learned-agents.md", "a learning rate of 1e-4, a clip range of 0.1 and no entropy bonus")

    paper = load_config("maskable_ppo", regime="default")
    assert paper["timesteps"] == 150_000 and paper["env"]["max_expires_per_step"] == 0
    says("training.md",
         "`agents/sb3/recipes/maskable_ppo.yaml` (dense F1 rewards, gamma = 1, 150k steps, EXPIRE masked)")
    says("training.md", "MaskablePPO has a recipe for every regime (8 slots shown, no cost per EXPIRE")
    says("environment.md", "The per-regime recipes of `wpb train` set their own (8 slots, no cost)")
    says("learned-agents.md", "keep 8 slots and no cost")
    every = DEFAULTS["eval"]["every_steps"]
    assert every == paper["eval"]["every_steps"]
    says("training.md", f"Every {every // 1000}k steps by default (a recipe's `eval: every_steps`)")


def test_the_bandit_learners_train_for_the_decisions_the_pages_give():
    from agents.learners.training import DEFAULT_TIMESTEPS

    decisions = f"{DEFAULT_TIMESTEPS:,} decisions"
    says("agents.md", f"trains one ({decisions}) into `DIR/learner.json`")
    says("learned-agents.md", f"`wpb train --algo epsilon_greedy|bandit_ucb` ({decisions};")
    says("learned-agents.md", f"the bandit learners are trained for {decisions}")


def test_the_sweep_and_make_learned_have_the_sizes_the_pages_give():
    sweep = yaml.safe_load((ROOT / "configs" / "sweep" / "learned.yaml").read_text(encoding="utf-8"))
    grids = [len(values) for values in sweep["hyperparams"].values()] or [1]
    trials = len(sweep["algos"]) * len(sweep["regimes"]) * len(sweep["seeds"]) * int(np.prod(grids))
    says("training.md", f"on the generated regimes ({trials} trials)")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    regimes, sources, seeds = (re.search(rf"^{name} := (.*)$", makefile, re.M).group(1).split()
                               for name in ("LEARNED_REGIMES", "REAL_SOURCES", "SEEDS"))
    target = makefile.split("\nlearned:")[1]
    assert "train --algo maskable_ppo" in target and "for a in epsilon_greedy bandit_ucb" in target  # 3 learners
    says("learned-agents.md", f"trains 3 learners x {len(seeds)} seeds on {len(regimes) + len(sources)} regimes "
                              f"and sources: hours")


def test_the_rllib_pages_defaults_are_the_functions():
    from agents.rllib.training import DEFAULT_ENV_KWARGS, masked_ppo_config, train_rllib_ppo

    config = {p.name: p.default for p in inspect.signature(masked_ppo_config).parameters.values()}
    training = {p.name: p.default for p in inspect.signature(train_rllib_ppo).parameters.values()}
    says("rllib.md", f"iterations=30, # {config['train_batch_size']:,} env steps each")
    lr = f"{config['lr']:.0e}".replace("e-0", "e-")  # 3e-4
    says("rllib.md", f"`train_batch_size` ({config['train_batch_size']:,} env steps per iteration), `minibatch_size` "
                     f"({config['minibatch_size']}), `num_epochs` ({config['num_epochs']}), `lr` ({lr}), "
                     f"`hidden_sizes` (`{list(config['hidden_sizes'])}`, the policy and value networks), "
                     f"`num_env_runners` ({config['num_env_runners']}:")
    says("rllib.md", f"`num_cpus` CPUs ({training['num_cpus']} by default;")
    says("rllib.md", f"`train_rllib_ppo` sets `torch.set_num_threads({training['torch_threads']})`")
    says("rllib.md", f"hence the defaults of {config['num_epochs']} passes of {config['minibatch_size']}")
    assert DEFAULT_ENV_KWARGS == {"budget_bytes": 10240, "dense_reward": True, "slots": 8, "expire_cost": 0.0}
    says("rllib.md", "The env arguments default to 10 KB, dense F1 rewards, 8 slots and no cost per EXPIRE")


# --------------------------------------------------------------------------- agents and evaluation


def test_the_agents_table_gives_the_baselines_parameters():
    rows = {row[0].strip("`"): row[3] for row in table("agents.md", "| name | spec alias | track |")}
    for name, parameter, phrase in (
        ("uniform_sample", "N", "(N={})"),
        ("random", "p", "p ({}, our choice)"),
        ("expire_oldest", "max_age", "max_age ({}, our choice)"),
        ("priority_threshold", "tau", "τ ({})"),
    ):
        default = inspect.signature(type(make_agent(name)).__init__).parameters[parameter].default
        assert phrase.format(default) in rows[name], (name, rows[name], default)


def test_the_agents_f1_table_is_what_its_commands_give(tmp_path, monkeypatch):
    text = raw("agents.md")
    block = re.search(r"Mean F1 over 10 generated episodes.*?```bash\n(.*?)```", text, re.S).group(1)
    commands = [shlex.split(line, comments=True) for line in block.replace("\\\n", " ").splitlines()]
    (eval_argv,) = [argv for argv in commands if argv[:2] == ["wpb", "eval"]]
    monkeypatch.chdir(tmp_path)
    assert wpb([*eval_argv[1:], "--quiet"]) == 0
    out = eval_argv[eval_argv.index("--out") + 1]
    f1 = defaultdict(list)
    with open(tmp_path / out / "results.csv", newline="", encoding="utf-8") as file:
        for row in csv.DictReader(file):
            f1[row["policy"], row["track"], row["mode"], int(row["budget_bytes"])].append(float(row["f1"]))
    rows = table("agents.md", "| agent | track | default 1 KB |")
    assert [row[0] for row in rows][-1] == "oracle_optimal (bound)"
    columns = [(regime, budget) for regime in ("default", "burst_redundancy") for budget in (1024, 10240, 102400)]
    for agent, track, *cells in rows:
        agent = agent.removesuffix(" (bound)")
        measured = [f"{np.mean(f1[agent, track, regime, budget]):.3f}" for regime, budget in columns]
        assert cells == measured, (agent, track, cells, measured)


def test_the_evaluation_limits_and_the_isolated_evaluations_constants():
    from wpb_gym.evaluation.grid import ISOLATED_BATCH
    from wpb_gym.evaluation.isolated.isolation import _TRANSFER_SECONDS
    from wpb_gym.evaluation.referee import DEFAULT_LIMITS, MAX_REASON_CHARS

    actions, seconds = DEFAULT_LIMITS.max_actions_per_step, DEFAULT_LIMITS.max_seconds_per_step
    says("evaluation.md", f"(defaults {actions:,} and {seconds:g} s)")
    says("evaluation-integrity.md", f"`RunLimits(max_actions_per_step={actions:_}, max_seconds_per_step={seconds})`")
    says("evaluation-integrity.md", f"`MalformedActionError` ({MAX_REASON_CHARS:,} characters at most)")
    says("evaluation-integrity.md", f"does not finish it within {_TRANSFER_SECONDS:g} s (a watchdog thread")
    says("evaluation-integrity.md", f"its process stopped after {_TRANSFER_SECONDS:g} s;")
    says("evaluation-integrity.md", f"episodes go in batches of {NUMBER_WORDS[ISOLATED_BATCH]},")
    says("evaluation-integrity.md", f"**Batches of {NUMBER_WORDS[ISOLATED_BATCH]} episodes**")


def test_the_grids_have_the_sizes_the_pages_give():
    # benchmarks/eval_grid.py's grid, read without running the script.
    script = ast.parse((ROOT / "benchmarks" / "eval_grid.py").read_text(encoding="utf-8"))
    grid = {node.targets[0].id: ast.literal_eval(node.value) for node in script.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id.isupper()}
    regimes, budgets, agents = grid["REGIMES"], grid["BUDGETS"], grid["AGENTS"]
    unprivileged = [a for a in agents if agent_entry(a).track == "unprivileged"]
    episodes = 10
    assert "generated_refs(REGIMES, [200], 10, seed=0)" in (ROOT / "benchmarks" / "eval_grid.py").read_text()
    runs = len(regimes) * len(budgets) * episodes * (len(agents) + len(unprivileged))
    assert (min(budgets), max(budgets)) == (1024, 1048576)
    says("benchmarks.md", f"{len(regimes)} regimes × {len(budgets)} budgets (1 KB–1 MB) × {episodes} episodes "
                          f"× both tracks × the paper's {len(agents)} baselines ({len(unprivileged)} on the "
                          f"unprivileged track), {runs:,} agent-episode runs")
    says("evaluation-integrity.md", f"{len(regimes)} regimes x {len(budgets)} budgets x {episodes} episodes x both "
                                    f"tracks x {len(agents)} baselines, {runs:,} runs")
    spec = yaml.safe_load((ROOT / "configs" / "eval" / "spec.yaml").read_text(encoding="utf-8"))
    says("evaluation.md",
         f"`configs/eval/spec.yaml` the spec's {len(spec['budgets'])} budgets × {len(spec['lengths'])} lengths")


def test_the_paper_grids_episodes_show_the_distinct_observations_evaluation_integrity_gives():
    episodes = [generate_episode(make_config(regime), 0, i)
                for regime in ("default", "burst_drift", "redundancy", "burst_redundancy") for i in range(10)]
    counts = [len({json.dumps(step.observation, sort_keys=True) for step in e.steps}) for e in episodes]
    says("evaluation-integrity.md", f"the grid's {len(counts)} episodes show {min(counts)} to {max(counts)} "
                                    f"distinct observations each in 200 steps")


# --------------------------------------------------------------------------- episodes and regimes


def test_the_pages_count_the_regimes_as_they_are():
    from wpb_gym import REGIMES

    models = [make_config(regime).change_model for regime in REGIMES]
    paper, contract = NUMBER_WORDS[models.count("paper")], NUMBER_WORDS[models.count("contract")]
    says("README.md", f"level with `breaking_detector` on the {contract} contract regimes")
    says("README.md", f"of the hindsight bound on the paper's {paper} regimes")
    says("learned-agents.md", f"MaskablePPO is **level** on all {contract} contract regimes")
    says("learned-agents.md", f"On the paper's {paper} regimes it reaches")
    says("getting-started.md", f"`make regimes` trains and compares on all {paper} paper regimes")
    says("training.md", f"is one config for the {paper} paper regimes")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^REGIMES := (.*)$", makefile, re.M).group(1).split() == [
        regime for regime, model in zip(REGIMES, models) if model == "paper"
    ]


def test_the_regimes_page_gives_the_generators_settings():
    from wpb_gym.episodes.generators import utility_scale as u

    text = page("regimes.md")
    (table_1,) = re.findall(r"Regimes \(paper §3, Table 1 defaults: (.*?); every field", text)
    paper = make_config("default")
    for key, value in (item.split("=") for item in table_1.split(", ")):
        assert getattr(paper, "length" if key == "T" else key) == ast.literal_eval(value), key
    says("regimes.md", f"`utility_by_step` (drift in a burst window {u.UTILITY_BURST_DRIFT:g}, other drift "
                       f"{u.UTILITY_DRIFT:g}, ordinary step {u.UTILITY_ORDINARY:g}, a step repeating the previous "
                       f"step's observation exactly {u.UTILITY_REPEAT:g})")
    says("regimes.md", f"Utilities: breaking change in force {u.UTILITY_DRIFT:g} ({u.UTILITY_BURST_DRIFT:g} in a "
                       f"burst), cosmetic change, revert, reverted or undone change {u.UTILITY_COSMETIC:g}, "
                       f"unchanged snapshot {u.UTILITY_ORDINARY:g}, exact repeat {u.UTILITY_REPEAT:g}, "
                       f"documentation section `doc_utility`, warm-up step {u.UTILITY_WARMUP:g}")
    says("real-drift.md", f"({u.UTILITY_DRIFT:g} critical, {u.UTILITY_COSMETIC:g} any other change)")

    contract = ("breaking", "reverts", "noisy_priority", "mixed_sizes", "contract_mix")
    c = {regime: make_config(regime) for regime in contract}
    shared = {(x.api_pool, x.warmup, x.breaking_prob, x.initially_deprecated) for x in c.values()}
    assert len(shared) == 1 and c["breaking"].warmup  # the table's "all:" and the warm-up
    says("regimes.md", f"A change is breaking with `breaking_prob` ({c['breaking'].breaking_prob})")
    says("regimes.md", f"with `initially_deprecated` {c['breaking'].initially_deprecated}, some start deprecated")
    b = c["breaking"]
    says("regimes.md", f"| Regime | Stream (all: {b.api_pool} endpoints shown once in a warm-up, `drift_prob` "
                       f"{b.drift_prob}, ρ = {b.priority_correlation}) |")
    r = c["reverts"]
    assert r.revert_prob == 0.5  # "half the revertible changes"
    says("regimes.md", f"| `reverts` | `drift_prob` {r.drift_prob}; half the revertible changes are rolled back "
                       f"within {r.revert_window} steps |")
    says("regimes.md", f"| `noisy_priority` | `breaking` with ρ = {c['noisy_priority'].priority_correlation} |")
    m = c["mixed_sizes"]
    assert m.renames
    says("regimes.md", f"| `mixed_sizes` | renames with critical {m.guide_min_bytes // 1024}–"
                       f"{m.guide_max_bytes // 1024} KB guides, and documentation sections of "
                       f"{m.doc_min_bytes // 1024}–{m.doc_max_bytes // 1024} KB (utility {m.doc_utility}) at "
                       f"`doc_prob` {m.doc_prob} |")
    mix = c["contract_mix"]
    assert (mix.revert_prob, mix.revert_window, mix.drift_prob) == (r.revert_prob, r.revert_window, r.drift_prob)
    assert (mix.renames, mix.doc_prob, mix.doc_utility) == (m.renames, m.doc_prob, m.doc_utility)
    # The warm-up: one step per endpoint; what is left of T = 200 and T = 100.
    warmup = generate_episode(make_config("breaking"), 0, 0).labels["warmup_steps"]
    assert warmup == b.api_pool
    says("regimes.md", f"its first {warmup} steps show each endpoint's starting snapshot once")
    says("regimes.md", f"The {200 - warmup} steps after the warm-up hold the changes (at T = 200; a contract "
                       f"regime needs T > {warmup})")
    says("real-drift.md",
         f"(the contract regimes' is {warmup} steps, leaving {100 - warmup} steps of change at T = 100)")


def test_the_headroom_grids_and_the_long_streams_budgets():
    headroom = yaml.safe_load((ROOT / "configs" / "eval" / "headroom.yaml").read_text(encoding="utf-8"))
    long = yaml.safe_load((ROOT / "configs" / "eval" / "headroom_long.yaml").read_text(encoding="utf-8"))
    episodes, seed = headroom["episodes_per_condition"], headroom["seed"]
    says("regimes.md", f"Measured here ({episodes} episodes per regime, seed {seed},")
    says("regimes.md", f"Long streams (`contract_mix`, {long['episodes_per_condition']} episodes each;")
    # Storing every step of a long stream would take about this many times its larger budget.
    short_ratio = np.mean([episode_costs(generate_episode(make_config("contract_mix", length=1000), 0, i)).sum()
                           for i in range(long["episodes_per_condition"])]) / 102_400
    long_ratio = episode_costs(generate_episode(make_config("contract_mix", length=10_000), 0, 0)).sum() / 1_048_576
    assert round(short_ratio) == round(long_ratio)
    says("regimes.md", f"storing every step would take about {round(short_ratio)}× the 100 KB / 1 MB budgets")


def test_freezing_the_discriminative_regimes_gives_the_hashes_the_regimes_page_gives(tmp_path):
    text = page("regimes.md")
    (command,) = re.findall(r"Frozen sets of the discriminative regimes \(`(wpb freeze [^`]*)`\)", text)
    argv = shlex.split(command.replace("--out DIR", f"--out {tmp_path / 'set'}"))
    assert wpb(argv[1:]) == 0
    manifest = json.loads((tmp_path / "set" / "MANIFEST.json").read_text(encoding="utf-8"))
    frozen = {entry["regime"]: entry["sha256"][:12] for entry in manifest["files"].values()}
    (hashes,) = re.findall(r"ours begin (.*?)\. The long streams", text)
    assert dict((regime, digest) for digest, regime in re.findall(r"`([0-9a-f]{12})` \((\w+)\)", hashes)) == frozen


# --------------------------------------------------------------------------- the query tier


def test_the_query_tiers_table_is_the_tiers_settings():
    from wpb_gym.episodes.generators.queries import QUERY_REGIMES, QueryStream, query_config

    rows = table("query-tier.md", "| tier | endpoints | families | steps |")
    assert [row[0].strip("`") for row in rows] == list(QUERY_REGIMES)
    for tier, endpoints, families, steps, checkpoints, queries, delay, boost, spread, jump, words, _state in rows:
        c = query_config(tier.strip("`"))
        rng = np.random.default_rng(0)
        stream = QueryStream(c, rng, np.random.default_rng(1), horizon=c.length)
        assert int(endpoints.replace(",", "")) == c.endpoints and int(families) == c.families
        assert int(steps.replace(",", "")) == c.length
        assert int(checkpoints) == sum(stream.is_checkpoint(t) for t in range(c.length))
        assert int(queries) == c.queries_per_checkpoint and delay == f"0-{c.max_burst_delay}"
        assert float(jump) == c.popularity_jump_prob
        assert float(boost.replace(",", "")) == c.migration_boost_max and float(spread) == c.burst_spread
        assert float(words) == c.integration_content == c.burst_content
    easy = query_config("queries_easy")
    says("query-tier.md", f"(`queries_easy` has {easy.length:,} steps and {easy.endpoints} endpoints;")
    lengths = sorted({query_config(t).length for t in QUERY_REGIMES})
    says("query-tier.md", f"generates 30 query-tier episodes of {lengths[0]:,} to {lengths[-1]:,} steps")
    (largest,) = {query_config(t).summary_max_bytes for t in QUERY_REGIMES}
    says("query-tier.md", f"snapshots run from about 200 bytes to {round(largest / 1000)} KB")


def test_the_query_tiers_learners_keepers_and_endless_defaults():
    from agents.learners.value_training import DEFAULTS
    from wpb_gym.envs.query_env import ENDLESS_DEFAULTS

    says("query-tier.md", f"two ReLU layers of {DEFAULTS['hidden']} units")
    says("query-tier.md", f"checkpoints (default {ENDLESS_DEFAULTS['endless_window']}) falls below "
                          f"`endless_threshold` (default {ENDLESS_DEFAULTS['endless_threshold']})")
    tuned = json.loads((ROOT / "agents" / "scripted" / "tuned_keepers.json").read_text(encoding="utf-8"))
    tiers = {(entry["seed"], entry["episodes"]) for keeper in tuned.values() for regime, budgets in keeper.items()
             if regime.startswith("queries_") for entry in budgets.values()}
    ((seed, episodes),) = tiers
    says("query-tier.md", f"tuned per tier and budget on training episodes (seed {seed}, {episodes} episodes)")
    says("query-tier.md", f"--seed {seed} --episodes {episodes} --jobs 2")
    stripe = tuned["keep_latest_migration"]["real_queries:stripe"]
    says("query-tier.md", f"`keep_latest_migration` answers {stripe['1024']['accuracy']:.3f} (1 KB) and "
                          f"{stripe['10240']['accuracy']:.3f} (10 KB) on Stripe's training episodes")


# --------------------------------------------------------------------------- real drift


NESTED_TYPES = {"nested_param_added", "nested_param_removed", "nested_required_added", "nested_required_removed"}


def windows() -> dict[str, str]:
    """Each source's periods, as the real-drift page's commands cut them."""
    commands = re.sub(r"\s*\\\n\s*", " ", raw("real-drift.md"))
    found = dict(re.findall(r"--source (\w+) --length 100 --windows (\S+) --out runs/real/\1\n", commands))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert found == {source: re.search(rf"^{source.upper()}_WINDOWS := (.*)$", makefile, re.M).group(1)
                     for source in ("stripe", "twilio")}  # the periods make learned cuts
    return found


@pytest.fixture(scope="module")
def real():
    """Per source: its change events and the episodes of each period at T = 100."""
    from wpb_gym.episodes.real.change_events import read_events
    from wpb_gym.episodes.real.episodes import RealEpisodeOptions, cut_period, parse_windows

    out = {}
    for source, periods in windows().items():
        events = read_events(ROOT / "data" / "apidrift" / f"{source}_snapshots.jsonl")
        options = RealEpisodeOptions(source=source, length=100)
        cuts = {period.name: cut_period(events, period, options) for period in parse_windows(periods)}
        out[source] = events, options, cuts
    return out


def test_the_real_drift_pages_defaults_are_the_options():
    from wpb_gym.episodes.real.episodes import RealEpisodeOptions

    options = RealEpisodeOptions(source="x")
    says("real-drift.md", f"`--revert-window-days` ({options.revert_window_days:g};")
    says("real-drift.md", f"`--min-critical` ({options.min_critical})")
    says("real-drift.md", f"(latent correlation {options.priority_correlation})")
    transfer = yaml.safe_load((ROOT / "configs" / "eval" / "real.yaml").read_text(encoding="utf-8"))
    means = sum(2 if agent_entry(a).track == "unprivileged" else 1 for a in transfer["agents"])
    says("real-drift.md", f"compares the {means} (policy, track) means with the real ones")
    says("real-drift.md", f"treat the {means} pairs as independent")


def test_the_change_event_logs_replay_as_the_real_drift_page_says(real):
    from wpb_gym.episodes.real.openapi_changes import (Snapshot, StateTimeline, diff_endpoints, replay_events,
                                                       with_revert_times)

    found = {}
    for source, (events, _options, _cuts) in real.items():
        states, timeline, derived, changes = {}, StateTimeline(), [], []
        for seq, group in itertools.groupby(events, key=lambda e: e.seq):
            group = list(group)
            after = replay_events(group, states)
            if not group[0].initial:
                first = group[0]
                derived += diff_endpoints(states, after, Snapshot(seq, first.commit, first.date, first.version))
                changes += group
            timeline.record(seq, group[0].date, after)
            states = after
        derived = {(e.seq, e.endpoint_key): e for e in with_revert_times(derived, timeline)}
        top = [e for e in changes if set(e.change) - NESTED_TYPES]
        agree = 0
        for event in top:
            ours = derived.get((event.seq, event.endpoint_key))
            if ours is None or [c for c in ours.change if c not in NESTED_TYPES] != [
                c for c in event.change if c not in NESTED_TYPES
            ]:
                continue
            if set(event.change) & NESTED_TYPES:  # the nested part is not in the log's states
                agree += 1
            elif (ours.breaking, ours.reverted_after_days) == (event.breaking, event.reverted_after_days):
                agree += 1
        found[source] = len(changes), len(top), agree, len(changes) - len(top)
    (s_changes, s_top, s_agree, s_nested), (t_changes, t_top, t_agree, t_nested) = found["stripe"], found["twilio"]
    says("real-drift.md",
         f"Stripe's log holds {s_changes:,} change events after its starting state, Twilio's {t_changes:,}.")
    assert s_agree == s_top
    says("real-drift.md", f"for 100% of Stripe's events with a top-level change ({s_top:,}) and "
                          f"{100 * t_agree / t_top:.2f}% of Twilio's ({t_agree:,} of {t_top:,};")
    says("real-drift.md", f"Nested-only events ({s_nested} Stripe, {t_nested} Twilio)")


def test_the_real_drift_sets_are_what_the_pages_say(real):
    heldout, split = {}, set()
    for source, (_events, _options, cuts) in real.items():
        episodes = cuts["heldout"].episodes
        critical = np.mean([len(e.critical_steps) for e in episodes])
        first, last = episodes[0].labels["first_date"][:7], episodes[-1].labels["last_date"][:7]
        heldout[source] = len(episodes), f"{critical:.1f}", first, last
        split.add(tuple(round(np.mean([e.labels[key] for e in episodes])) for key in ("warmup_steps", "change_events")))
    (s_n, s_critical, s_first, s_last), (t_n, t_critical, t_first, t_last) = heldout["stripe"], heldout["twilio"]
    ((warmup, changes),) = split  # the same on both sources
    says("real-drift.md", f"({warmup} and {changes} on average in the held-out periods below, at T = 100, on both "
                          f"sources)")
    says("real-drift.md", f"{s_n} held-out episodes for Stripe ({s_first} → {s_last}, {s_critical} critical steps "
                          f"each) and {t_n} for Twilio ({t_first} → {t_last}, {t_critical} each)")
    says("learned-agents.md", f"the {s_n} Stripe and {t_n} Twilio episodes of each history's held-out period, T = 100")
    decidable = {row[0]: row[1] for row in table("learned-agents.md", "| regime | critical / episode |")}
    assert (decidable["real:stripe"], decidable["real:twilio"]) == (s_critical, t_critical)


def test_the_real_drift_counts_the_pages_give(real):
    from wpb_gym.episodes.real.episodes import is_critical, parse_windows

    undone, removals = {}, {}
    for source, (events, options, cuts) in real.items():
        (training_end,) = [p.end for p in parse_windows(windows()[source]) if p.name == "train"]
        breaking = [e for e in events if e.breaking]
        for part, chosen in (("train", [e for e in breaking if e.date[:10] <= str(training_end)]),
                             ("after", [e for e in breaking if e.date[:10] > str(training_end)])):
            undone[source, part] = sum(not is_critical(e, options) for e in chosen), len(chosen)
        for period in ("train", "heldout"):
            episodes = cuts[period].episodes
            critical = [(e, t) for e in episodes for t in e.critical_steps]
            removed = sum(bool(e.steps[t].observation.get("removed")) for e, t in critical)
            removals[source, period] = removed, len(critical)
    assert undone["twilio", "train"][0] == 0
    twilio_train, (twilio_after_undone, twilio_after) = undone["twilio", "train"][1], undone["twilio", "after"]
    stripe_undone, stripe_train = undone["stripe", "train"]
    says("real-drift.md", f"none of Twilio's {twilio_train} training-period breaking events was undone that fast "
                          f"({twilio_after_undone} of {twilio_after} after it were), against {stripe_undone} of "
                          f"{stripe_train} of Stripe's")
    says("learned-agents.md", f"none of Twilio's {twilio_train} training-period breaking events was undone that fast, "
                              f"against {twilio_after_undone} of the {twilio_after} after it")
    says("real-drift.md", "Removals are {} of Twilio's {} held-out critical steps and {} of Stripe's {}".format(
        *removals["twilio", "heldout"], *removals["stripe", "heldout"]))
    says("real-drift.md",
         "(removals are {} of Twilio's {} training critical steps)".format(*removals["twilio", "train"]))
    # Stripe's snapshots whose contract did not change since their endpoint was last shown (a
    # nested change): critical in the training period, hardly in the held-out one.
    share = {}
    for period in ("train", "heldout"):
        same = critical = 0
        for episode in real["stripe"][2][period].episodes:
            shown = {}
            for step in episode.steps:
                o = step.observation
                contract = (tuple(o["params"]), tuple(o["required"]), o["deprecated"], o.get("removed", False))
                if step.t >= episode.labels["warmup_steps"] and shown.get(o["api"]) == contract:
                    same += 1
                    critical += step.t in episode.critical_steps
                shown[o["api"]] = contract
        share[period] = critical, same
    (train_critical, train_same), (heldout_critical, heldout_same) = share["train"], share["heldout"]
    train_share, heldout_share = 100 * train_critical / train_same, 100 * heldout_critical / heldout_same
    says("learned-agents.md", f"Stripe's training period, where {train_share:.0f}% of such steps are critical (nested "
                              f"parameters removed); in the held-out period {heldout_share:.0f}% are "
                              f"({heldout_critical} of {heldout_same})")


# --------------------------------------------------------------------------- the README's summaries


def test_the_quickstarts_figures_are_the_learned_agents_measurement():
    (row,) = [row for row in table("learned-agents.md", "| env arguments | F1 / bound per training seed |")
              if row[0].startswith("**the defaults**")]
    seeds = [float(x) for x in row[1].split(", ")]
    low, high, mean = f"{min(seeds):.2f}", f"{max(seeds):.2f}", f"{np.mean(seeds):.3f}"
    assert row[2] == f"**{mean}**" and f"seeds 0-{len(seeds) - 1}" in row[0]
    n = len(seeds)
    says("README.md", f"the printed fraction of the hindsight F1 bound is {low}–{high} for each of {n} training "
                      f"seeds (mean {mean}; `python benchmarks/quickstart_learns.py --seeds {n}`")
    says("getting-started.md", f"the fraction is {low}–{high} for each of {n} training seeds "
                               f"(`python benchmarks/quickstart_learns.py --seeds {n}`")
    says("environment.md", f"The snippet reaches {low}–{high} of the hindsight bound on held-out episodes for "
                           f"each of {n} training seeds")
    regimes_table = {row[0]: row[3] for row in table("training.md", "| regime | training | hindsight bound |")}
    says("environment.md", f"with them it reaches {regimes_table['default'].strip('*')} (`make regimes`")


def test_the_readmes_learned_agents_summary_is_the_learned_agents_tables():
    rows = table("learned-agents.md", "| regime | agent | per-seed means |")
    ppo = {row[0]: np.mean([float(x) for x in row[2].split(", ")]) for row in rows if row[1] == "MaskablePPO"}
    paper = [ppo[r] for r in ("default", "burst_drift", "redundancy", "burst_redundancy")]
    says("README.md", f"reaches {min(paper):.2f}–{max(paper):.2f} of the hindsight bound on the paper's four regimes")
    says("learned-agents.md", "it reaches {:.3f} (`default`), {:.3f} (`burst_drift`;".format(*paper[:2]))
    says("learned-agents.md", "{:.3f} (`redundancy`) and {:.3f} (`burst_redundancy`)".format(*paper[2:]))
    decidable = {row[0]: row for row in table("learned-agents.md", "| regime | critical / episode |")}
    contract = ("breaking", "reverts", "noisy_priority", "mixed_sizes", "contract_mix")
    within = max(number(decidable[r][6]) for r in contract)
    says("README.md", f"`breaking_detector` comes within {within:.3f} of the bound on the contract regimes")
    says("README.md", f"on the contract regimes `breaking_detector` is within {within:.3f} of the bound")
    stripe, twilio = decidable["real:stripe"], decidable["real:twilio"]
    decidable_share = [100 - number(row[2].rstrip("%")) for row in (stripe, twilio)]
    says("README.md", "{:.0f}% (Stripe) and {:.0f}% (Twilio) on real drift".format(*decidable_share))
    headroom = [number(row[6]) for row in (stripe, twilio)]
    says("README.md", "within {:.2f} (Stripe) and {:.2f} (Twilio) of what is reachable".format(*headroom))


def test_the_readmes_query_tier_summary_is_the_query_tier_tables():
    hard = table("query-tier.md", "| Budget | Bound | Feasible |", after="`queries_hard`:")
    (row,) = [r for r in hard if r[0] == "10KB"]
    bound, privileged, scripted = number(row[1]), number(row[3]), number(row[4])
    assert "(`causal_privileged`)" in row[3] and "(`keep_latest_migration`)" in row[4]
    says("README.md", f"the hindsight bound is {bound:.3f}, a baseline that knows the hidden state (never the future) "
                      f"answers {privileged:.3f}, and the best tuned scripted policy {scripted:.3f}")
    header = "| regime | T | budget | track | agent | seeds |"
    keeper, ppo = ([r for r in table("query-tier.md", header, after=after) if r[0] == "queries_hard" and r[2] == "10240"
                    and r[4] == agent and r[10].startswith("keep_latest_migration")]
                   for agent, after in (("value_keeper", None), ("maskable_ppo", "**MaskablePPO.**")))
    says("README.md", f"beats that scripted policy by {keeper[0][11]} over {keeper[0][5]} seeds, and a MaskablePPO "
                      f"taught by the same baseline beats it by {ppo[0][11]}")


def test_regimes_page_states_the_generators_size_ceilings():
    from wpb_gym.episodes.generators import paper, queries

    s, p = paper.SIZE_CEILINGS, paper.PRODUCT_CEILINGS
    assert s["length"] == s["api_pool"] == queries._CEILINGS["length"] == 1_000_000
    assert p["api_pool", "max_params"] == 2**24 and p["length", "max_params"] == 2**26
    assert s["doc_max_bytes"] == s["guide_max_bytes"] == 2**20
    assert p["length", "doc_max_bytes"] == p["length", "guide_max_bytes"] == 2**33
    assert queries.MAX_QUERIES == 2**24
    says("regimes.md", "`length` and `api_pool` at most 1,000,000, `api_pool` × `max_params` at most 2**24, `length` ×")
    says("regimes.md", "`doc_max_bytes` and `guide_max_bytes` at most 1 MiB")
    says("regimes.md", "2**24 queries in all")


def test_integrity_page_states_what_an_isolated_batch_may_hold():
    from wpb_gym.evaluation.isolated import isolation

    says("evaluation-integrity.md", f"once the batch holds {isolation._MAX_HELD_ACTIONS:,} actions, a run holding "
                                    f"more than {isolation._RUN_HELD_ACTIONS:,}")
