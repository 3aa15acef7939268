"""The paper's released episodes (``data/paper_episodes``) and what docs/paper-conformance.md says
of them: the files are read and written back byte for byte and agree with their manifest, the
documented commands give the paper's published numbers, the differences from the paper's code
hold on its files, and the other numbers on them that docs/agents.md and
docs/evaluation-integrity.md give."""

from __future__ import annotations

import json
import re
import shlex
from functools import partial
from pathlib import Path

import numpy as np
import pytest

from agents.registry import agent_entry, make_agent
from wpb_gym import episode_costs, episode_oracle, generate_episode, make_config, policy_episode
from wpb_gym.cli import main
from wpb_gym.episodes.frozen import manifest_kind
from wpb_gym.episodes.jsonl import load_jsonl, write_jsonl
from wpb_gym.episodes.sources import read_episodes
from wpb_gym.evaluation.grid import PolicySpec, given_refs, run_grid

ROOT = Path(__file__).resolve().parents[2]
PAPER = ROOT / "data" / "paper_episodes"
REGIMES = ("default", "burst_drift", "redundancy", "burst_redundancy")
BUDGETS = (1024, 10240, 102400, 1048576)
FILE_NAME = re.compile(r"episodes__schema=priority_v1__mode=(\w+)__seed=(\d+)__steps=(\d+)__n=(\d+)\.jsonl")


def doc(name: str) -> str:
    """A docs page with its whitespace collapsed, so phrases can be found across line breaks."""
    return " ".join((ROOT / "docs" / name).read_text(encoding="utf-8").split())


def paper_files() -> list[Path]:
    return sorted(PAPER.glob("*.jsonl"))


@pytest.fixture(scope="module")
def episodes():
    return read_episodes(PAPER)


# --------------------------------------------------------------------------- the files


def test_the_released_files_are_read_and_written_back_byte_for_byte(tmp_path, episodes):
    # docs/regimes.md: the loader reads them unchanged and a load/write round trip reproduces them.
    assert len(paper_files()) == 4
    for path in paper_files():
        again = tmp_path / path.name
        write_jsonl(again, load_jsonl(path))
        assert again.read_bytes() == path.read_bytes(), path.name
    # The folder reads as plain JSONL: the manifest beside the files is the paper's, not a frozen set's.
    assert manifest_kind(PAPER) == "foreign"
    assert episodes == [episode for path in paper_files() for episode in load_jsonl(path)]


def test_the_released_files_agree_with_their_manifest():
    manifest = json.loads((PAPER / "MANIFEST.json").read_text(encoding="utf-8"))
    assert (manifest["seed"], manifest["steps"], manifest["episodes"]) == (0, 200, 10)
    assert manifest["modes"] == list(REGIMES) and sorted(manifest["files"]) == sorted(REGIMES)
    # Its paths are the paper repository's (data/episodes/...): the names are the files here.
    assert sorted(Path(p).name for p in manifest["files"].values()) == [p.name for p in paper_files()]
    for mode, listed in manifest["files"].items():
        name = Path(listed).name
        assert FILE_NAME.fullmatch(name).groups() == (
            mode, str(manifest["seed"]), str(manifest["steps"]), str(manifest["episodes"])
        )
        file_episodes = load_jsonl(PAPER / name)
        assert [e.episode_id for e in file_episodes] == list(range(manifest["episodes"]))
        for e in file_episodes:
            assert len(e) == manifest["steps"] and e.regime == e.labels["mode"] == mode
            assert {s.metadata["mode"] for s in e.steps} == {mode}
            assert e.total_drift_events == len(e.critical_steps) > 0
            assert e.labels["max_utility"] == e.utilities.sum()
            # schema priority_v1: the privileged hint is the step's utility over 6, at most 1.
            assert [s.metadata["priority"] for s in e.steps] == [min(u / 6, 1.0) for u in e.utilities]


# --------------------------------------------------------------------------- the published numbers

# The paper's numbers (Tables 2-4), as docs/paper-conformance.md states them.
PUBLISHED_F1 = {
    ("default", "fifo_store_all"): ["0.019", "0.093", "0.155", "0.155"],
    ("default", "priority_threshold"): ["0.446", "1.000", "1.000", "1.000"],
    ("default", "uniform_sample"): ["0.039", "0.084"],  # at 1 KB and 10 KB
    ("burst_redundancy", "fifo_store_all"): ["0.126", "0.176", "0.285", "0.285"],
}
# Table 4 at 10 KB, default regime: utilization, write density, staleness, drift coverage.
PUBLISHED_DIAGNOSTICS = {
    "fifo_store_all": ["0.994", "0.247", "174.8", "0.188"],
    "priority_threshold": ["0.337", "0.084", "94.3", "1.000"],
}


def documented_commands() -> list[list[str]]:
    """The shell block of docs/paper-conformance.md, as argument lists after ``wpb``."""
    text = (ROOT / "docs" / "paper-conformance.md").read_text(encoding="utf-8")
    (block,) = re.findall(r"```bash\n(.*?)```", text, re.S)
    commands = [shlex.split(line) for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    assert all(argv[0] == "wpb" for argv in commands)
    return [argv[1:] for argv in commands]


def markdown_tables(text: str) -> dict[str, dict[str, list[str]]]:
    """The tables of ``wpb report --paper-tables``: heading -> policy -> cells."""
    tables: dict[str, dict[str, list[str]]] = {}
    heading = None
    for line in text.splitlines():
        if line.startswith("## "):
            heading = line[3:]
            tables[heading] = {}
        elif line.startswith("| ") and not line.startswith("| Policy"):
            policy, *cells = [cell.strip() for cell in line.strip("|").split("|")]
            tables[heading][policy.strip("`")] = cells
    return tables


def test_the_documented_commands_give_the_published_numbers(tmp_path, monkeypatch, capsys):
    evaluate, report = documented_commands()
    assert evaluate[0] == "eval" and report[:2] == ["report", "runs/paper_conformance"]
    monkeypatch.chdir(ROOT)  # the commands are written for the repository root
    out = tmp_path / "paper_conformance"

    def run(argv):
        return main([str(out) if arg == "runs/paper_conformance" else arg for arg in argv])

    assert run(evaluate + ["--quiet"]) == 0
    capsys.readouterr()
    assert run(report) == 0
    tables = markdown_tables(capsys.readouterr().out)

    for (regime, policy), f1 in PUBLISHED_F1.items():
        assert tables[f"Mean F1 vs memory budget: {regime}, T=200"][policy][: len(f1)] == f1, (regime, policy)
    diagnostics = tables["Memory diagnostics at 10240 bytes: default, T=200"]
    for policy, values in PUBLISHED_DIAGNOSTICS.items():
        utilization, write_density, _expire_rate, staleness, drift_coverage = diagnostics[policy]
        assert [utilization, write_density, staleness, drift_coverage] == values, policy

    # The page states exactly these numbers.
    page = doc("paper-conformance.md")
    fifo, fifo_diag = PUBLISHED_F1["default", "fifo_store_all"], PUBLISHED_DIAGNOSTICS["fifo_store_all"]
    assert (
        f"`fifo_store_all` F1 = {' / '.join(fifo)} at 1 KB / 10 KB / 100 KB / 1 MB (Table 2) with utilization "
        f"{fifo_diag[0]}, write density {fifo_diag[1]}, staleness {fifo_diag[2]}, drift coverage {fifo_diag[3]} "
        "at 10 KB (Table 4)" in page
    )
    threshold = PUBLISHED_F1["default", "priority_threshold"]
    threshold_diag = PUBLISHED_DIAGNOSTICS["priority_threshold"]
    assert f"`priority_threshold` {' / '.join(threshold)} and {' / '.join(threshold_diag)};" in page
    assert f"`uniform_sample` {' / '.join(PUBLISHED_F1['default', 'uniform_sample'])} at 1 KB / 10 KB" in page
    assert f"(Table 3) `fifo_store_all` {' / '.join(PUBLISHED_F1['burst_redundancy', 'fifo_store_all'])}." in page


# --------------------------------------------------------------------------- the other agents on these files


def spec(label: str, name: str, **params) -> PolicySpec:
    return PolicySpec(label, partial(make_agent, name, **params), agent_entry(name).track)


@pytest.fixture(scope="module")
def other_agents_rows(episodes):
    policies = [
        spec("last_kb_1", "last_kb", max_expires=1),
        spec("merge_aggressive", "merge_aggressive"),
        spec("merge_skip", "merge_aggressive", if_merge_fails="skip"),
    ]
    return run_grid(given_refs(episodes, str(PAPER)), policies, list(BUDGETS), ["privileged"])


def mean_f1(rows, regime: str, policy: str) -> list[str]:
    return [
        f"{np.mean([r['f1'] for r in rows if (r['mode'], r['policy'], r['budget_bytes']) == (regime, policy, b)]):.3f}"
        for b in BUDGETS
    ]


def test_the_numbers_docs_agents_gives_on_the_released_files(other_agents_rows):
    page = doc("agents.md")
    # last_kb expiring one item per step, and merge_aggressive as the spec words it: 1 KB / 10 KB.
    assert mean_f1(other_agents_rows, "default", "last_kb_1")[:2] == ["0.036", "0.122"]
    assert "`last_kb` matches only with `max_expires=1` (0.036 / 0.122)" in page
    assert mean_f1(other_agents_rows, "default", "merge_aggressive")[:2] == ["0.046", "0.142"]
    assert "That gives 0.046 / 0.142 there." in page
    # if_merge_fails="skip": 0.513 at 10 KB and above (default), 0.592 at 100 KB and 1 MB (burst_redundancy).
    assert mean_f1(other_agents_rows, "default", "merge_skip")[1:] == ["0.513"] * 3
    assert mean_f1(other_agents_rows, "burst_redundancy", "merge_skip")[2:] == ["0.592"] * 2
    assert (
        "the paper's 0.513 at 10 KB and above (default regime) and 0.592 at 100 KB and 1 MB (burst_redundancy)"
        in page
    )


def test_isolated_evaluation_scores_the_released_files_as_in_process_does(episodes):
    # docs/evaluation-integrity.md: identical results in both modes, on the paper's released episodes.
    assert "(tested on the paper's released episodes and on every regime)" in doc("evaluation-integrity.md")
    refs = [ref for ref in given_refs(episodes, str(PAPER)) if ref.index < 2]  # two episodes per regime
    names = ("no_mem", "fifo_store_all", "uniform_sample", "last_kb", "merge_aggressive", "priority_threshold",
             "priority_greedy")
    policies = [spec(name, name) for name in names]
    tracks = ["unprivileged", "privileged"]
    in_process = run_grid(refs, policies, list(BUDGETS), tracks)
    isolated = run_grid(refs, policies, list(BUDGETS), tracks, isolate=True)
    assert len(in_process) == 8 * len(BUDGETS) * (5 + 7) and all(row["error"] == "" for row in isolated)
    assert isolated == in_process


# --------------------------------------------------------------------------- the deliberate differences


def knapsack(costs: np.ndarray, utilities: np.ndarray, capacity: int) -> np.ndarray:
    """best[b]: the most utility a set of steps costing at most b bytes holds (0/1 knapsack by bytes)."""
    best = np.zeros(capacity + 1)
    for cost, utility in zip(costs.tolist(), utilities.tolist(), strict=True):
        if cost <= capacity:
            best[cost:] = np.maximum(best[cost:], best[: capacity + 1 - cost] + utility)
    return best


def test_the_oracle_is_exact_at_every_budget_on_the_released_files(episodes):
    # The paper's oracle was exact at small budgets only; this one is exact at each of them.
    small = (1024, 2048, 4096, 10240)
    for e in episodes:
        costs = episode_costs(policy_episode(e, "privileged"))
        oracle = episode_oracle(e, small + BUDGETS[2:], "privileged")
        best = knapsack(costs, e.utilities, max(small))
        assert [oracle.utility(b) for b in small] == [best[b] for b in small], (e.regime, e.episode_id)
        # At 100 KB and 1 MB every step fits: the whole episode's utility.
        assert costs.sum() <= BUDGETS[2]
        assert oracle.utility(BUDGETS[2]) == oracle.utility(BUDGETS[3]) == e.labels["max_utility"]


def utility_counts(episode_list) -> dict[tuple[bool, float], int]:
    """(the step repeats the previous step's observation, its utility) -> steps, over the
    non-drift steps after t = 0."""
    counts: dict[tuple[bool, float], int] = {}
    for e in episode_list:
        critical = set(e.critical_steps)
        for before, step in zip(e.steps, e.steps[1:]):
            if step.t not in critical:
                key = (step.observation == before.observation, float(e.utilities[step.t]))
                counts[key] = counts.get(key, 0) + 1
    return counts


def test_repeats_are_worth_half_in_every_regime_here_and_in_the_paper_only_in_redundancy(episodes):
    for regime in REGIMES:
        paper = utility_counts([e for e in episodes if e.regime == regime])
        ours = utility_counts([generate_episode(make_config(regime), 0, i) for i in range(10)])
        # Here: an exact repeat of the previous step is worth 0.5, any other ordinary step 1.
        assert set(ours) == {(True, 0.5), (False, 1.0)}, regime
        if "redundancy" in regime:
            # The paper's redundancy files: 0.5 for every non-drift step after t = 0, repeat or not.
            assert set(paper) == {(True, 0.5), (False, 0.5)}, regime
        else:
            # Its other files: a repeat is worth as much as any ordinary step.
            assert set(paper) == {(True, 1.0), (False, 1.0)}, regime


def test_drifts_add_fresh_parameter_names_here_and_could_repeat_one_in_the_paper(episodes):
    def listing_a_name_twice(episode_list):
        return sum(len(set(s.observation["params"])) < len(s.observation["params"])
                   for e in episode_list for s in e.steps)

    for regime in REGIMES:
        # An endpoint starts with distinct names: a name listed twice was added again by a drift.
        assert listing_a_name_twice([e for e in episodes if e.regime == regime]) > 0, regime
        assert listing_a_name_twice([generate_episode(make_config(regime), 0, i) for i in range(10)]) == 0, regime
