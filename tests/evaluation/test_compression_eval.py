"""Compression through evaluation: the grid, isolated play, the wire, results, reports, the CLI
and the exec protocol."""

from __future__ import annotations

import pytest
from limits_grid import assert_isolated_rows_match, by_run, specs

from agents.external.protocol import ProtocolError, actions, episode_message, step_message
from agents.registry import make_agent
from wpb_gym.core.compression import CODEC, Compression
from wpb_gym.core.policy import EpisodeContext
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.store_limits import StoreLimits
from wpb_gym.core.types import MemoryAction, Step
from wpb_gym.evaluation.grid import generated_refs, run_grid
from wpb_gym.evaluation.isolated.wire import decode_action, encode_action
from wpb_gym.evaluation.referee import MalformedActionError, normalise
from wpb_gym.evaluation.reports.report import leaderboard, read_results

COMPRESSION = Compression(0.75)
BUDGETS = (1024, 4096)
AGENTS = ("breaking_detector", "breaking_compressor", "oracle_optimal", "last_kb")


@pytest.fixture(scope="module")
def refs():
    return generated_refs(["breaking", "contract_mix"], [120], 2, seed=7)


@pytest.fixture(scope="module")
def rows(refs):
    return run_grid(refs, specs(AGENTS), BUDGETS, ("privileged",), store_limits=StoreLimits(compression=COMPRESSION))


def test_the_oracle_reaches_the_bound_and_no_write_only_policy_passes_it(rows):
    for row in rows:
        assert row["compression"] == COMPRESSION.text() and row["write_time"] == ""
        if row["policy"] == "oracle_optimal":
            assert row["rejected_actions"] == 0 and row["regret_write_only"] == pytest.approx(0.0, abs=1e-9)
        assert row["f1"] <= row["oracle_f1"] + 1e-12
        assert row["policy_utility"] <= row["oracle_utility"] + 1e-9


def test_compression_raises_the_bound_and_the_compressor_compresses(rows, refs):
    plain = by_run(run_grid(refs, specs(("breaking_detector", "breaking_compressor")), BUDGETS, ("privileged",)))
    higher = 0
    for row in rows:
        other = plain.get((row["mode"], row["episode_index"], row["budget_bytes"], row["policy"]))
        if other is not None:
            assert row["oracle_f1"] >= other["oracle_f1"] - 1e-12
            higher += row["oracle_f1"] > other["oracle_f1"] + 1e-12
            if row["policy"] == "breaking_compressor":  # more, smaller items
                assert row["bytes_used"] < other["bytes_used"] or row["tp"] > other["tp"]
    assert higher > 0


def test_isolated_play_gives_the_same_rows(refs, rows):
    assert_isolated_rows_match(refs, rows, ("breaking_detector", "breaking_compressor", "oracle_optimal"),
                               BUDGETS, StoreLimits(compression=COMPRESSION))


def test_the_leaderboard_says_the_compression(rows):
    assert ("Limits beside the budget, compressed writes (what a compressed critical step is worth): "
            "1KB: `credit=0.75`" in leaderboard(rows, 1024))


def test_a_compressed_write_crosses_the_wire_and_is_read_once():
    step = Step(0, {"api": "a", "version": 1, "params": ["x"]}, {})
    plain = normalise(MemoryAction.write_compressed(step, reason="r"), step, 0, "p")
    assert plain == ("WRITE", None, CODEC, "r")
    for accepted in (True, False):
        assert decode_action(encode_action(plain, accepted)) == (plain, accepted)
        bare = ("WRITE", None, CODEC, None)
        assert decode_action(encode_action(bare, accepted)) == (bare, accepted)
    assert decode_action([4, True, "r", 7]) is None  # a compressed WRITE has no target
    with pytest.raises(MalformedActionError, match="the only codec is 'summary/1'"):
        normalise(_with_codec(step, "gzip"), step, 0, "p")


def _with_codec(step, codec):
    action = MemoryAction.write(step)
    action.__dict__["codec"] = codec  # what a policy can do to its own object after construction
    return action


TINY = ["--regimes", "breaking", "--lengths", "80", "--episodes-per-condition", "2", "--budgets", "1KB",
        "--tracks", "unprivileged", "--quiet", "--agents", "breaking_detector,breaking_compressor"]


def test_wpb_eval_records_the_compression_and_compare_refuses_unlike_runs(wpb_run, tmp_path):
    code, _, err = wpb_run("eval", *TINY, "--compression", "credit=0.75", "--out", str(tmp_path / "c"))
    assert code == 0, err
    assert {r["compression"] for r in read_results(tmp_path / "c" / "results.csv")} == {"credit=0.75"}
    assert '"compression": "credit=0.75"' in (tmp_path / "c" / "run.json").read_text()
    assert wpb_run("eval", *TINY, "--out", str(tmp_path / "plain"))[0] == 0
    code, _, err = wpb_run("compare", str(tmp_path / "plain"), str(tmp_path / "c"), "--metric", "f1")
    assert code == 2 and "compression none" in err and "Traceback" not in err


@pytest.mark.parametrize("extra, named", [
    (["--compression", "on"], "--compression: expected NAME=VALUE items"),
    (["--compression", "credit=2"], r"--compression: credit: expected a number in [0, 1]"),
    (["--compression", "credit=0.5", "--write-time", "total=4"], "one at a time"),
    (["--compression", "credit=0.5", "--regimes", "queries_medium"], "the query tier (queries_medium) has no bound"),
])
def test_bad_compression_exits_2_naming_the_option(wpb_run, tmp_path, extra, named):
    base = TINY[2:] if "--regimes" in extra else TINY  # (--regimes is given once)
    code, _, err = wpb_run("eval", *base, *extra, "--out", str(tmp_path / "bad"))
    assert code == 2 and named in err and "Traceback" not in err
    assert not (tmp_path / "bad").exists()


def test_run_episode_compresses_in_process_and_isolated():
    from wpb_gym import run_episode
    from wpb_gym.episodes.generators.paper import make_config
    from wpb_gym.episodes.sources import GeneratedEpisodes

    episode = GeneratedEpisodes(make_config("contract_mix", length=120), 1).episode(0)
    results = []
    for isolate in (False, True):
        run = run_episode(make_agent("breaking_compressor"), episode, 1024, compression=COMPRESSION,
                          isolate=isolate, sandbox=None)
        assert run.store.compressed_timesteps() and run.store.compression == COMPRESSION
        assert all(item.codec == CODEC for item in run.store.iter_items())
        results.append(run.metrics.as_row())
    assert results[0] == results[1]
    with pytest.raises(ValueError, match="one at a time"):
        run_episode(make_agent("last_kb"), episode, 1024, compression=COMPRESSION, kind_budgets={"doc": 1})


def test_the_exec_protocol_says_the_compression_and_takes_a_codec():
    step = Step(3, {"api": "a", "version": 1, "params": ["x"]}, {})
    context = EpisodeContext(length=5, budget_bytes=1024, track="unprivileged", compression={"credit": 0.75})
    assert episode_message(context)["compression"] == {"credit": 0.75}
    store = ByteMemoryStore(1024, compression=COMPRESSION)
    message = step_message(step, store.view())
    assert message["compressed_bytes"] < message["bytes"] and message["memory"]["compressed"] == []
    assert step_message(step, ByteMemoryStore(1024).view())["compressed_bytes"] is None
    (action,) = actions(b'{"actions": [{"op": "ADD", "codec": "summary/1"}]}', step)
    assert action.codec == CODEC and action.action == "WRITE"
    for bad in (b'{"actions": [{"op": "WRITE", "codec": "zip"}]}', b'{"actions": [{"op": "SKIP", "codec": "summary/1"}]}'):
        with pytest.raises(ProtocolError, match='"codec" is "summary/1", and only on WRITE or ADD'):
            actions(bad, step)
