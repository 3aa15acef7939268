"""The query tier through evaluation: each run's query accuracy, the hindsight bound beside it in
results.csv, and what the run's tables make of them.

Every figure here is recomputed from the scoring layer (``score_queries``, ``query_bound``)
or from the rows themselves, never typed in.
"""

from __future__ import annotations

import csv
import io
import math
from functools import partial

import numpy as np
import pytest

from agents.registry import agent_entry, make_agent
from wpb_gym.core.types import Episode, Step
from wpb_gym.episodes.generators.regimes import generate_episode, make_config
from wpb_gym.evaluation.grid import QUERY_COLUMNS, ROW_COLUMNS, PolicySpec, given_refs, query_bounds, run_grid
from wpb_gym.evaluation.reports.compare import compare_runs
from wpb_gym.evaluation.reports.report import leaderboard, read_results, results_csv, summary_csv
from wpb_gym.evaluation.reports.seed_stats import seed_table
from wpb_gym.evaluation.reports.tables import headroom_table
from wpb_gym.evaluation.runner import run_episode
from wpb_gym.scoring import query_bound as query_bound_module
from wpb_gym.scoring.queries import score_queries
from wpb_gym.scoring.query_bound import query_bound

SMALL = {"endpoints": 20, "families": 4, "length": 20 + 8 * 10, "checkpoint_interval": 10,
         "queries_per_checkpoint": 30, "summary_max_bytes": 800}
BUDGETS = (2048, 4096)
TRACKS = ("unprivileged", "privileged")
AGENTS = ("keep_latest_lfu", "keep_latest_family", "last_kb", "causal_privileged")


def query_episode(regime: str = "queries_medium", index: int = 0, seed: int = 0) -> Episode:
    return generate_episode(make_config(regime, **SMALL), seed, index)


def spec(name: str) -> PolicySpec:
    return PolicySpec(name, partial(make_agent, name), agent_entry(name).track)


@pytest.fixture(scope="module")
def episodes() -> list[Episode]:
    """Three episodes of each of two tiers, and two of a paper regime (no queries)."""
    queried = [query_episode(regime, i) for regime in ("queries_easy", "queries_medium") for i in range(3)]
    paper = [generate_episode(make_config("default", length=60), 0, i) for i in range(2)]
    return queried + paper


@pytest.fixture(scope="module")
def rows(episodes) -> list[dict]:
    return run_grid(given_refs(episodes), [spec(n) for n in AGENTS], BUDGETS, TRACKS)


def queried_rows(rows):
    return [r for r in rows if r["mode"].startswith("queries_")]


# ---------------------------------------------------------------------------- scoring a run
class Recorder:
    """keep_latest_lfu, remembering what its end_episode was told."""

    def __init__(self) -> None:
        self.inner = make_agent("keep_latest_lfu")
        self.name, self.track = "recorder", "unprivileged"
        self.outcomes: list = []

    def start_episode(self, context) -> None:
        self.inner.start_episode(context)

    def select(self, step, store):
        return self.inner.select(step, store)

    def end_episode(self, outcome) -> None:
        self.outcomes.append(outcome)


def test_a_run_of_a_query_episode_carries_its_query_score_and_tells_the_policy():
    episode = query_episode()
    policy = Recorder()
    run = run_episode(policy, episode, 4096)
    assert run.queries == score_queries(episode, run.store)
    assert run.queries.asked == len(episode.labels["queries"]) and 0 < run.queries.correct < run.queries.asked
    (outcome,) = policy.outcomes
    assert outcome.metrics == {**run.metrics.as_row(), "query_accuracy": run.queries.accuracy}


def test_a_run_of_an_episode_without_queries_has_none():
    episode = generate_episode(make_config("default", length=60), 0, 0)
    policy = Recorder()
    run = run_episode(policy, episode, 4096)
    assert run.queries is None
    assert policy.outcomes[0].metrics == run.metrics.as_row()


def test_an_isolated_run_scores_the_queries_as_in_process():
    episode = query_episode(index=1)
    here = run_episode(make_agent("keep_latest_lfu"), episode, 2048)
    there = run_episode(make_agent("keep_latest_lfu"), episode, 2048, isolate=True)
    assert here.queries == there.queries and here.queries.correct > 0


# ---------------------------------------------------------------------------- results.csv
def test_rows_carry_the_run_accuracy_and_the_bound_of_their_episode(episodes, rows):
    by_index = {(e.regime, i): e for e in episodes for i in [e.labels["episode_id"]]}
    checked = 0
    for row in queried_rows(rows)[::7]:
        episode = by_index[row["mode"], row["episode_index"]]
        run = run_episode(make_agent(row["policy"]), episode, row["budget_bytes"], row["track"])
        assert row["query_accuracy"] == run.queries.accuracy
        bound = query_bound(episode, row["budget_bytes"], row["track"], time_limit=0)
        assert (row["query_bound"], row["query_feasible"]) == (bound.upper, bound.feasible)
        assert row["query_feasible"] <= row["query_bound"] and row["query_accuracy"] <= row["query_bound"]
        checked += 1
    assert checked >= 5
    paper = [r for r in rows if r["mode"] == "default"]
    assert paper and all(r[c] is None for r in paper for c in QUERY_COLUMNS)


def test_the_bound_is_solved_once_per_budget_when_the_tracks_cost_alike(monkeypatch):
    episode = query_episode(index=2)
    calls = []
    real = query_bound_module.query_bound

    def counting(episode, budget, track, **kwargs):
        calls.append((budget, track, kwargs["time_limit"]))
        return real(episode, budget, track, **kwargs)

    monkeypatch.setattr(query_bound_module, "query_bound", counting)
    conditions = [(track, budget) for track in TRACKS for budget in BUDGETS]
    bounds = query_bounds(episode, conditions)
    assert calls == [(budget, "unprivileged", 0.0) for budget in BUDGETS]
    assert all(bounds["privileged", b] is bounds["unprivileged", b] for b in BUDGETS)
    # A priority hint on every step makes the privileged track's steps dearer: its own bounds.
    hinted = Episode(
        steps=[Step(s.t, s.observation, {**s.metadata, "priority": 0.5}) for s in episode.steps], labels=episode.labels
    )
    calls.clear()
    query_bounds(hinted, conditions)
    assert sorted(calls) == sorted((budget, track, 0.0) for track in TRACKS for budget in BUDGETS)
    calls.clear()
    assert query_bounds(generate_episode(make_config("default", length=60), 0, 0), conditions) == {}
    assert calls == []


def test_rows_of_query_episodes_do_not_depend_on_jobs_or_isolation(episodes, rows):
    refs = given_refs(episodes)
    specs = [spec(n) for n in AGENTS]
    assert run_grid(refs, specs, BUDGETS, TRACKS, jobs=2) == rows
    # Isolated grids judge most runs on a ledger of costs; a query episode's runs need the store.
    assert run_grid(refs, specs, BUDGETS, TRACKS, isolate=True) == rows


def test_results_csv_leaves_the_query_columns_empty_without_queries_and_reads_them_back(rows, tmp_path):
    path = tmp_path / "results.csv"
    path.write_text(results_csv(rows, {"seed": 0}), encoding="utf-8")
    raw = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    assert [c for c in raw[0] if c in QUERY_COLUMNS] == list(QUERY_COLUMNS)
    for written, row in zip(raw, rows, strict=True):
        for column in QUERY_COLUMNS:
            assert written[column] == ("" if row[column] is None else repr(row[column]))
    back = read_results(path)
    for read, row in zip(back, rows, strict=True):
        for column in QUERY_COLUMNS:
            assert math.isnan(read[column]) if row[column] is None else read[column] == row[column]
        assert {k: v for k, v in read.items() if k not in QUERY_COLUMNS} == {
            k: (str(v) if k == "episode_id" else v) for k, v in row.items() if k not in QUERY_COLUMNS
        }


def test_results_written_before_the_query_columns_still_read(rows, tmp_path):
    text = results_csv(rows, {"seed": 0})
    table = list(csv.reader(io.StringIO(text)))
    keep = [i for i, name in enumerate(table[0]) if name not in QUERY_COLUMNS]
    old = tmp_path / "old.csv"
    with open(old, "w", newline="", encoding="utf-8") as handle:
        csv.writer(handle, lineterminator="\n").writerows([[line[i] for i in keep] for line in table])
    back = read_results(old)
    assert len(back) == len(rows) and list(back[0]) == list(ROW_COLUMNS)
    assert all(math.isnan(r[c]) for r in back for c in QUERY_COLUMNS)
    assert [r["f1"] for r in back] == [r["f1"] for r in rows]


def test_a_bad_query_cell_is_named_by_line_and_column(rows, tmp_path):
    text = results_csv(rows[:3], {"seed": 0}).splitlines()
    cells = text[2].split(",")
    cells[ROW_COLUMNS.index("query_bound")] = "high"
    path = tmp_path / "bad.csv"
    path.write_text("\n".join([text[0], text[1], ",".join(cells)]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad.csv, line 3, column 'query_bound': expected a number, got 'high'"):
        read_results(path)


def test_the_summary_has_query_metrics_only_where_the_rows_hold_them(rows):
    lines = list(csv.DictReader(io.StringIO(summary_csv(rows))))
    assert not any(value == "nan" for line in lines for value in line.values())
    queried = {line["metric"] for line in lines if line["mode"].startswith("queries_")}
    paper = {line["metric"] for line in lines if line["mode"] == "default"}
    assert set(QUERY_COLUMNS) <= queried and not set(QUERY_COLUMNS) & paper
    line = next(x for x in lines if x["metric"] == "query_accuracy" and x["policy"] == "keep_latest_lfu")
    chosen = [r["query_accuracy"] for r in rows if r["policy"] == "keep_latest_lfu" and r["mode"] == line["mode"]
              and r["track"] == line["track"] and r["budget_bytes"] == int(line["budget_bytes"])]
    assert float(line["mean"]) == pytest.approx(np.mean(chosen)) and int(line["episodes"]) == len(chosen) == 3
    # Without query rows the summary is what it was before the columns existed.
    assert summary_csv([r for r in rows if r["mode"] == "default"]) == summary_csv(
        [{k: v for k, v in r.items() if k not in QUERY_COLUMNS} for r in rows if r["mode"] == "default"]
    )


# ---------------------------------------------------------------------------- the leaderboard
def _section(text: str, heading: str) -> list[str]:
    lines = text.splitlines()
    start = lines.index(heading)
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    while not lines[end - 1]:  # the blank line before the next section
        end -= 1
    return lines[start:end]


def test_a_query_group_leads_with_query_accuracy_ranks_by_it_and_states_the_bound(rows):
    text = leaderboard(rows, budget=4096)
    section = _section(text, "## queries_medium, T=100, privileged track")
    chosen = [r for r in rows if r["mode"] == "queries_medium" and r["budget_bytes"] == 4096
              and r["track"] == "privileged"]
    upper = np.mean([r["query_bound"] for r in chosen if r["policy"] == "last_kb"])
    feasible = np.mean([r["query_feasible"] for r in chosen if r["policy"] == "last_kb"])
    assert section[2].startswith(f"Hindsight bound on query accuracy: {upper:.3f} [")
    assert f"(a schedule found with hindsight reaches {feasible:.3f}); mean over 3 episodes" in section[2]
    table = [line for line in section if line.startswith("| ")]
    assert table[0] == ("| Policy | Query acc.@4KB | Recall@4KB | F1@4KB | Util/KB | Avg Staleness | Episodes |")
    means = {a: np.mean([r["query_accuracy"] for r in chosen if r["policy"] == a]) for a in AGENTS}
    ranked = sorted(AGENTS, key=lambda a: -means[a])
    shown = [line.split(" | ")[0].removeprefix("| ").removesuffix(" (oracle)") for line in table[1:]]
    assert shown == ranked
    for line, agent in zip(table[1:], shown, strict=True):
        assert line.split(" | ")[1].startswith(f"{means[agent]:.3f} [")


def test_groups_without_queries_are_unchanged(rows):
    paper = [r for r in rows if r["mode"] == "default"]
    alone = leaderboard(paper, budget=4096)
    assert alone == leaderboard([{k: v for k, v in r.items() if k not in QUERY_COLUMNS} for r in paper], budget=4096)
    mixed = leaderboard(rows, budget=4096)
    for track in TRACKS:
        heading = f"## default, T=60, {track} track"
        assert _section(mixed, heading) == _section(alone, heading)


# ---------------------------------------------------------------------------- headroom
def test_the_query_headroom_table_gives_the_bound_the_best_policies_and_the_gates(rows):
    text = headroom_table(rows, run="runs/q")
    assert text.startswith("# Headroom (mean F1 over episodes")  # the paper regime's table first
    assert "Written by `wpb report runs/q --headroom`" in text
    section = _section(text, "## queries_easy, T=100")
    header, _, *lines = [line for line in section if line.startswith("|")]
    assert header.split(" | ")[:5] == ["| Budget", "Bound", "Feasible", "Best privileged", "Best unprivileged"]
    assert len(lines) == len(BUDGETS)
    for line, budget in zip(lines, BUDGETS, strict=True):
        chosen = [r for r in rows if r["mode"] == "queries_easy" and r["budget_bytes"] == budget]

        def mean(policy, track, column="query_accuracy"):
            return np.mean([r[column] for r in chosen if r["policy"] == policy and r["track"] == track])

        bound = mean("last_kb", "unprivileged", "query_bound")
        privileged = ("causal_privileged", mean("causal_privileged", "privileged"))
        unprivileged = max(((a, mean(a, "unprivileged")) for a in AGENTS[:3]), key=lambda x: x[1])
        gap = privileged[1] - unprivileged[1]
        expected = [
            f"{budget // 1024}KB",
            f"{bound:.3f}",
            f"{mean('last_kb', 'unprivileged', 'query_feasible'):.3f}",
            f"{privileged[1]:.3f} (`{privileged[0]}`)",
            f"{unprivileged[1]:.3f} (`{unprivileged[0]}`)",
            f"{unprivileged[1] / bound:.3f}",
            f"{gap:+.3f}",
            f"{gap / (bound - unprivileged[1]):.3f}",
            "3",
        ]
        assert line.removeprefix("| ").removesuffix(" |").split(" | ") == expected


def test_a_learned_agent_is_never_the_best_it_is_measured_against(rows):
    # A learned agent better than every scripted policy, and one on the privileged track.
    query_rows = [r for r in rows if r["mode"] == "queries_easy"]
    learned = [{**r, "policy": "vk_s0", "query_accuracy": 1.0} for r in query_rows if r["policy"] == "last_kb"]
    privileged = [{**r, "policy": "priv_model", "policy_track": "privileged", "query_accuracy": 1.0}
                  for r in query_rows if r["policy"] == "causal_privileged"]
    plain = headroom_table(query_rows)
    assert headroom_table(query_rows + learned + privileged, learned={"vk_s0", "priv_model"}).replace(
        " Learned agents are never best, being measured against the best: `priv_model`, `vk_s0` "
        "(`--highlight` shows them).", "") == plain
    assert "1.000 (`vk_s0`)" in headroom_table(query_rows + learned)  # told nothing, it would be


def test_wpb_report_tells_the_learned_agents_from_the_runs_agents(tmp_path, capsys):
    from wpb_gym.cli.evaluation import learned_labels

    net = tmp_path / "learner.json"
    assert learned_labels(["keep_latest_lfu", "causal_privileged", f"vk=value_keeper:{net}",
                           f"sb3:{tmp_path / 'model.zip'}", "epsilon_greedy", {"name": "bandit_ucb", "label": "ucb"},
                           "no_such_agent"]) == {"vk", "sb3:model", "epsilon_greedy", "ucb"}


def test_headroom_without_query_rows_is_the_f1_table_alone(rows):
    paper = [r for r in rows if r["mode"] == "default"]
    text = headroom_table(paper)
    assert "Query-tier" not in text
    assert text == headroom_table([{k: v for k, v in r.items() if k not in QUERY_COLUMNS} for r in paper])


# ---------------------------------------------------------------------------- compare and seeds
def test_compare_on_query_accuracy_pairs_the_query_episodes_only(rows):
    a = [r for r in rows if r["policy"] == "keep_latest_lfu"]
    b = [{**r, "policy": "keep_latest_lfu"} for r in rows if r["policy"] == "keep_latest_family"]
    comparisons = compare_runs(a, b, metric="query_accuracy")
    assert comparisons and {c.condition[0] for c in comparisons} == {"queries_easy", "queries_medium"}
    for c in comparisons:
        mode, steps, budget, track, _ = c.condition
        pick = lambda side: [r["query_accuracy"] for r in side  # noqa: E731
                             if (r["mode"], r["budget_bytes"], r["track"]) == (mode, budget, track)]
        assert c.episodes == 3 and c.lift == pytest.approx(np.mean(pick(b)) - np.mean(pick(a)))


def test_seeds_measure_the_gap_to_the_query_bound(rows):
    (result, *_) = seed_table(rows, {"fam": ["keep_latest_family"]}, ["keep_latest_lfu"], metric="query_accuracy",
                              reps=200)
    mode, steps, budget, track = result.condition
    chosen = [r for r in rows if (r["mode"], r["budget_bytes"], r["track"]) == (mode, budget, track)]
    mine = {r["episode_index"]: r for r in chosen if r["policy"] == "keep_latest_family"}
    gaps = [max(0.0, r["query_bound"] - r["query_accuracy"]) for r in mine.values()]
    assert mode.startswith("queries_") and result.gap == pytest.approx(np.mean(gaps))
    assert result.seed_means[0] == pytest.approx(np.mean([r["query_accuracy"] for r in mine.values()]))
    with pytest.raises(ValueError, match="no results hold query_accuracy"):
        seed_table([r for r in rows if r["mode"] == "default"], {"x": ["last_kb"]}, [], metric="query_accuracy")
