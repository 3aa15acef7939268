"""Agents written outside Python: the ``wpb-agent/1`` protocol, ``ExecAgent`` and ``exec:PATH``.

Golden messages and replies from the protocol's definition; agent programs written here in
Python (any executable would do) for the process's life and its failures; the shipped examples
(``last_kb.js`` decides as ``last_kb`` does; ``memory_llm.py`` through its model hook, with the
fake model); and ``wpb eval --agents exec:PATH``, which runs them isolated.
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest

from agents.external import protocol
from agents.external.exec_agent import ExecAgent, ProgramError
from agents.external.protocol import ProtocolError
from agents.registry import make_agent
from wpb_gym import generate_episode, make_config
from wpb_gym.cli import main
from wpb_gym.core.policy import EpisodeContext, EpisodeOutcome
from wpb_gym.core.store import ByteMemoryStore
from wpb_gym.core.types import MemoryAction, Step
from wpb_gym.episodes.generators.queries import generate_query_episode, query_config
from wpb_gym.evaluation.isolated.sandbox import problem
from wpb_gym.evaluation.runner import run_episode

EXAMPLES = Path(__file__).resolve().parents[2] / "agents" / "external" / "examples"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="needs Node.js for the JavaScript example")


def program(tmp_path: Path, body: str, name: str = "agent.py") -> Path:
    """An executable Python script at ``tmp_path/name`` (this interpreter runs it)."""
    path = tmp_path / name
    path.write_text(f"#!{sys.executable}\nimport json, sys, time\n{body}\n")
    path.chmod(0o755)
    return path


# Writes what it reads to log.jsonl beside it, and writes every step.
RECORDER = """
log = open(__file__.rsplit("/", 1)[0] + "/log.jsonl", "a")
for line in sys.stdin:
    message = json.loads(line)
    log.write(line); log.flush()
    if message["type"] == "hello":
        print(json.dumps({"protocol": "wpb-agent/1"}), flush=True)
    elif message["type"] == "step":
        print(json.dumps({"actions": [{"op": "WRITE"}]}), flush=True)
"""


def _step(t: int, api: str = "api.v1.a") -> Step:
    return Step(t, {"api": api, "params": ["x"], "version": 1}, {"kind": "endpoint"})


def test_a_step_message_is_the_step_its_cost_and_memory_by_t():
    store = ByteMemoryStore(4096)
    first, second = _step(0), _step(1, "api.v1.b")
    store.apply(MemoryAction.write(first), 0)
    store.apply(MemoryAction.write(second), 1)
    from wpb_gym.core.accounting import estimate_bytes

    message = protocol.step_message(_step(2), store.view())
    assert message == {
        "type": "step", "t": 2, "observation": {"api": "api.v1.a", "params": ["x"], "version": 1},
        "metadata": {"kind": "endpoint"}, "bytes": estimate_bytes(_step(2)), "compressed_bytes": None,
        "memory": {"bytes_used": estimate_bytes(first) + estimate_bytes(second), "budget_bytes": 4096,
                   "items": [[0, estimate_bytes(first), "api.v1.a"], [1, estimate_bytes(second), "api.v1.b"]],
                   "kind_used": None, "time_left": None, "compressed": None},
    }
    assert protocol.line(message).endswith(b"\n") and protocol.line(message).count(b"\n") == 1
    context = EpisodeContext(length=9, budget_bytes=4096, track="unprivileged", episode_id="e")
    assert protocol.episode_message(context) == {"type": "episode", "episode_id": "e", "length": 9,
                                                 "budget_bytes": 4096, "track": "unprivileged",
                                                 "kind_budgets": None, "write_time": None, "compression": None}
    assert protocol.end_message(EpisodeOutcome({"f1": 0.5, "recall": float("nan")})) == {
        "type": "end", "metrics": {"f1": 0.5, "recall": None}}


def test_with_kind_budgets_the_messages_say_each_kinds_limit_and_use():
    store = ByteMemoryStore(4096, {"endpoint": 1000, "doc": 500})
    first = _step(0)
    store.apply(MemoryAction.write(first), 0)
    from wpb_gym.core.accounting import estimate_bytes

    memory = protocol.step_message(_step(1), store.view())["memory"]
    assert memory["kind_used"] == {"endpoint": estimate_bytes(first), "doc": 0}
    context = EpisodeContext(length=9, budget_bytes=4096, track="unprivileged", kind_budgets={"endpoint": 1000})
    assert protocol.episode_message(context)["kind_budgets"] == {"endpoint": 1000}


@pytest.mark.parametrize("reply, expected", [
    ({"actions": []}, []),
    ({"actions": [{"op": "WRITE", "reason": "new"}]}, [("WRITE", None, "new")]),
    ({"actions": [{"op": "EXPIRE", "target": 3}, {"op": "WRITE"}]}, [("EXPIRE", 3, None), ("WRITE", None, None)]),
    ({"actions": [{"op": "MERGE", "target": 3}]}, [("MERGE", 3, None)]),
    ({"actions": [{"op": "SKIP"}]}, [("SKIP", None, None)]),
    # A memory system's operations (Mem0's names)
    ({"actions": [{"op": "ADD"}]}, [("WRITE", None, None)]),
    ({"actions": [{"op": "UPDATE", "target": 3}]}, [("EXPIRE", 3, None), ("WRITE", None, None)]),
    ({"actions": [{"op": "UPDATE", "target": 3, "merge": True}]}, [("MERGE", 3, None)]),
    ({"actions": [{"op": "DELETE", "target": 3}]}, [("EXPIRE", 3, None)]),
    ({"actions": [{"op": "NONE"}]}, [("SKIP", None, None)]),
])
def test_replies_are_memory_actions(reply, expected):
    step = _step(5)
    actions = protocol.actions(json.dumps(reply).encode(), step)
    assert [(a.action, a.target_t, a.reason) for a in actions] == expected
    assert all(a.step is step for a in actions if a.action in ("WRITE", "MERGE"))


@pytest.mark.parametrize("reply, match", [
    (b"write", "the reply to step 5 is not a line of JSON"),
    (b'{"actions": [], "extra": 1}', r'the reply must be \{"actions": \[...\]\}'),
    (b'[{"op": "WRITE"}]', r'the reply must be \{"actions"'),
    (b'{"actions": [{"op": "STORE"}]}', r"actions\[0\]: op 'STORE' is not one of WRITE, MERGE"),
    (b'{"actions": ["WRITE"]}', r'actions\[0\]: an action is an object with "op"'),
    (b'{"actions": [{"op": "EXPIRE"}]}', r'actions\[0\]: EXPIRE needs "target", the t of an item held'),
    (b'{"actions": [{"op": "EXPIRE", "target": true}]}', "EXPIRE needs \"target\""),
    (b'{"actions": [{"op": "WRITE", "target": 1}]}', 'WRITE takes no "target"'),
    (b'{"actions": [{"op": "WRITE", "when": 1}]}', r"unknown field\(s\) \['when'\]"),
    (b'{"actions": [{"op": "WRITE", "reason": 7}]}', "reason must be a string"),
    (b'{"actions": [{"op": "ADD", "delta": {}}]}', '"delta" goes with MERGE'),
    (b'{"actions": [{"op": "DELETE", "target": 1, "merge": true}]}', '"merge" is true or false, and only on UPDATE'),
    (b'{"actions": [NaN]}', "not a line of JSON"),
    (b"[" * 100_000 + b"]" * 100_000, "not a line of JSON"),
    (b'{"actions": []}\xff', "not a line of JSON"),
])
def test_malformed_replies_are_named(reply, match):
    with pytest.raises(ProtocolError, match=match):
        protocol.actions(reply, _step(5))


def test_an_agent_program_hears_every_episode_and_step_and_answers(tmp_path):
    agent = ExecAgent(path=str(program(tmp_path, RECORDER)))
    episodes = [generate_episode(make_config("breaking", length=90), seed=0, index=i) for i in range(2)]
    runs = [run_episode(agent, episode, 2048) for episode in episodes]
    agent.close()
    kinds = [json.loads(line)["type"] for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert kinds == ["hello"] + (["episode"] + ["step"] * 90 + ["end"]) * 2  # one process, two episodes
    assert all(run.metrics.as_row()["write_actions"] > 0 for run in runs)
    assert [a.action.action for a in runs[0].actions][:1] == ["WRITE"]


@needs_node
@pytest.mark.parametrize("budget", [1024, 10240])
def test_the_javascript_example_decides_as_last_kb(budget):
    for index in range(2):
        episode = generate_episode(make_config("breaking", length=200), seed=3, index=index)
        js, py = ExecAgent(path=str(EXAMPLES / "last_kb.js")), make_agent("last_kb")
        got, want = run_episode(js, episode, budget), run_episode(py, episode, budget)
        js.close()
        assert [(a.t, a.action.action, a.action.target_t, a.action.reason) for a in got.actions] == \
            [(a.t, a.action.action, a.action.target_t, a.action.reason) for a in want.actions]
        assert any(a.action.action == "EXPIRE" for a in got.actions)


def test_the_memory_system_example_asks_its_model_through_the_hook():
    config = query_config("queries_easy", endpoints=12, families=3, length=160, checkpoint_interval=10,
                          queries_per_checkpoint=20, summary_max_bytes=600)
    episode = generate_query_episode(config, 0, 0)
    agent = ExecAgent(path=str(EXAMPLES / "memory_llm.py"), args=["--model-command", "./memory_llm.fake_model.py"],
                      timeout=60)
    run = run_episode(agent, episode, 4096)
    agent.close()
    api_at = {step.t: step.observation.get("api") for step in episode.steps if isinstance(step.observation, dict)}
    by_t: dict[int, list] = {}
    for a in run.actions:
        by_t.setdefault(a.t, []).append(a.action)
    # The fake model's answers, as the protocol maps them: an UPDATE is an EXPIRE of a memory of
    # the same endpoint (without the "make room" reason of an eviction), then a WRITE; a DELETE,
    # of a deprecated endpoint's memory, an EXPIRE alone; an ADD, a WRITE.
    updates = deletes = 0
    for t, actions in by_t.items():
        own = [a for a in actions if a.action == "EXPIRE" and a.reason is None]
        assert all(api_at[a.target_t] == api_at[t] for a in own)
        if own and actions[-1].action == "WRITE":
            updates += 1
        elif own:
            assert len(actions) == 1 and episode.steps[t].observation["deprecated"]
            deletes += 1
    assert updates > 0 and deletes > 0 and run.metrics.as_row()["write_actions"] > updates
    assert run.queries is not None and 0 < run.queries.accuracy <= 1


def test_the_memory_system_example_needs_its_model_command(tmp_path):
    agent = ExecAgent(path=str(EXAMPLES / "memory_llm.py"), timeout=30)
    episode = generate_episode(make_config("breaking", length=90), seed=0, index=0)
    with pytest.raises(ProgramError, match=r"ended \(exit status 1\) before reading or answering"):
        run_episode(agent, episode, 2048)


@pytest.mark.parametrize("body, error, match", [
    ("sys.exit(3)", ProgramError, r"ended \(exit status 3\) before reading or answering (hello|the hello message)"),
    ("sys.stdin.readline(); print('hi', flush=True)", ProtocolError, "the answer to hello is not a line of JSON"),
    ("sys.stdin.readline(); print(json.dumps({'protocol': 'wpb-agent/9'}), flush=True)", ProtocolError,
     r'the answer to hello must be \{"protocol": "wpb-agent/1"\}'),
    ("sys.stdin.readline(); time.sleep(30)", ProgramError, "no answer to hello within 0.5 s"),
    ("sys.stdin.readline(); print(json.dumps({'protocol': 'wpb-agent/1'}), flush=True)\n"
     "for line in sys.stdin:\n    if 'step' in line:\n        print('{\"actions\": [{\"op\": \"PUT\"}]}', flush=True)",
     ProtocolError, r"step 0: actions\[0\]: op 'PUT' is not one of"),
])
def test_a_failing_program_is_a_named_error(tmp_path, body, error, match):
    agent = ExecAgent(path=str(program(tmp_path, body)), timeout=0.5)
    episode = generate_episode(make_config("breaking", length=90), seed=0, index=0)
    with pytest.raises(error, match=match) as raised:
        run_episode(agent, episode, 2048)
    assert str(raised.value).startswith(f"exec: {tmp_path / 'agent.py'}: ")


def test_a_line_nothing_asked_for_is_refused_not_read_as_the_next_answer(tmp_path):
    # It also answers the episode message: read as step 0's answer, it would shift every decision.
    chatty = RECORDER.replace('elif message["type"] == "step":', 'elif message["type"] in ("step", "episode"):')
    agent = ExecAgent(path=str(program(tmp_path, chatty)))
    episode = generate_episode(make_config("breaking", length=90), seed=0, index=0)
    with pytest.raises(ProtocolError, match=r"wrote '.*WRITE.*' before step \d+ was sent; only hello and step"):
        run_episode(agent, episode, 2048)


def test_bad_agent_settings_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="exec: nowhere/agent: no such file"):
        ExecAgent(path="nowhere/agent")
    with pytest.raises(IsADirectoryError, match="is a folder; expected an executable file"):
        ExecAgent(path=str(tmp_path))
    script = tmp_path / "plain.py"
    script.write_text("print()\n")
    with pytest.raises(PermissionError, match=r"not executable \(chmod \+x it"):
        ExecAgent(path=str(script))
    runnable = program(tmp_path, "pass")
    with pytest.raises(ValueError, match="args must be a list of strings"):
        ExecAgent(path=str(runnable), args="--fast")
    with pytest.raises(ValueError, match="track must be one of"):
        ExecAgent(path=str(runnable), track="oracle")  # labels are never sent
    with pytest.raises(ValueError, match="timeout must be a number of seconds"):
        ExecAgent(path=str(runnable), timeout=0)


def wpb(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@needs_node
@pytest.mark.skipif(problem() is not None, reason="needs the sandbox of isolated evaluation (Linux namespaces)")
def test_wpb_eval_runs_an_exec_agent_isolated_and_it_ties_the_baseline_it_mirrors(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = wpb(capsys, "eval", "--agents", f"last_kb,exec:{EXAMPLES / 'last_kb.js'}", "--regimes", "breaking",
                       "--lengths", 120, "--budgets", "1KB,10KB", "--episodes-per-condition", 2, "--out", out,
                       "--quiet")
    assert code == 0, err
    assert "note: exec:" in err and "evaluated isolated (--isolate)" in err
    assert json.loads((out / "run.json").read_text())["isolation"].startswith("sandbox")
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    by_cell: dict[tuple, dict[str, tuple]] = {}
    for row in rows:
        by_cell.setdefault((row["episode_hash"], row["budget_bytes"], row["track"]), {})[row["policy"]] = (
            row["f1"], row["bytes_used"], row["write_actions"], row["expire_actions"], row["error"])
    # The program plays the track it declares (unprivileged) only.
    assert {key[2] for key, cell in by_cell.items() if "exec:last_kb" in cell} == {"unprivileged"}
    both = [cell for cell in by_cell.values() if len(cell) == 2]
    assert len(both) == 4 and all(len(set(cell.values())) == 1 for cell in both)


@pytest.mark.skipif(problem() is not None, reason="needs the sandbox of isolated evaluation (Linux namespaces)")
def test_wpb_eval_names_an_exec_agent_that_fails_without_a_traceback(tmp_path, capsys):
    crash = program(tmp_path, "sys.stdin.readline(); print(json.dumps({'protocol': 'wpb-agent/1'}), flush=True)\n"
                              "sys.exit(3)", name="crash.py")
    code, _, err = wpb(capsys, "eval", "--agents", f"exec:{crash}", "--regimes", "breaking", "--lengths", 100,
                       "--budgets", "1KB", "--episodes-per-condition", 1, "--out", tmp_path / "run", "--quiet")
    assert code == 1 and "ProgramError: exec: " in err and "ended (exit status 3)" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()  # made for the run, removed with it
    code, _, err = wpb(capsys, "eval", "--agents", "exec:nowhere.js", "--regimes", "breaking", "--lengths", 100,
                       "--out", tmp_path / "run2", "--quiet")
    assert code == 2 and "agent 'exec:nowhere': FileNotFoundError" in err and "no such file" in err and "Traceback" not in err


def test_the_agent_the_protocol_page_writes_is_fifo_store_all(tmp_path):
    page = (Path(__file__).resolve().parents[2] / "docs" / "agent-protocol.md").read_text()
    code = page.split("## Writing one", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    agent = program(tmp_path, code)
    for budget in (1024, 4096):
        episode = generate_episode(make_config("default", length=150), seed=1, index=0)
        exec_agent = ExecAgent(path=str(agent))
        got, want = run_episode(exec_agent, episode, budget), run_episode(make_agent("fifo_store_all"), episode, budget)
        exec_agent.close()
        assert [(a.t, a.action.action) for a in got.actions] == [(a.t, a.action.action) for a in want.actions]
        assert got.metrics.as_row()["write_actions"] > 0


def test_commands_that_play_agents_in_their_own_process_refuse_other_programs(tmp_path, capsys):
    agent = f"exec:{EXAMPLES / 'last_kb.js'}"
    code, _, err = wpb(capsys, "dataset", "--agent", agent, "--dataset-id", "wpb/x-v0", "--episodes", 1)
    assert code == 2 and "another program is only ever run isolated" in err and "Traceback" not in err
    config = tmp_path / "a.yaml"
    config.write_text(f"agents: [{agent}]\nregimes: [breaking]\nlengths: [100]\nbudgets: [1024]\n"
                      "episodes_per_condition: 1\n")
    code, _, err = wpb(capsys, "ablate", config, config, "--seeds", 2)
    assert code == 2 and "isolate: true" in err and "Traceback" not in err


def test_a_run_is_keyed_on_the_program_and_the_files_its_sandbox_shows(tmp_path):
    from wpb_gym.cli.evaluation import agent_files

    agent = program(tmp_path, RECORDER, name="keeper.py")
    weights = tmp_path / "keeper.weights.json"
    weights.write_text("[1]")
    (tmp_path / "other.json").write_text("[]")
    before = agent_files([f"exec:{agent}"])
    assert set(before["exec:keeper"]) == {str(agent), str(weights)}
    weights.write_text("[2]")
    assert agent_files([f"exec:{agent}"]) != before


@pytest.mark.parametrize("reply", [
    b'{"actions": [{"op": "WRITE"}, {"op": "EXPIRE", "target": 1}]}',
    b'{"actions": [{"op": "UPDATE", "target": 1}, {"op": "DELETE", "target": 2}]}',
    b'{"actions": [{"op": "ADD"}, {"op": "NONE"}]}',
])
def test_nothing_follows_the_write_that_ends_a_step(reply):
    with pytest.raises(ProtocolError, match=r"actions\[1\]: follows a (WRITE|MERGE), which ends the step's actions"):
        protocol.actions(reply, _step(5))


@needs_node
@pytest.mark.skipif(problem() is not None, reason="needs the sandbox of isolated evaluation (Linux namespaces)")
def test_the_protocol_pages_table_is_what_its_config_writes(tmp_path, capsys):
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "exec_examples"
    code, _, err = wpb(capsys, "eval", "--config", root / "configs" / "eval" / "exec_examples.yaml", "--out", out,
                       "--quiet")
    assert code == 0, err
    board = (out / "leaderboard.md").read_text()
    table = board[board.index("| Policy |"):].split("\n\n")[0].strip()
    assert table in (root / "docs" / "agent-protocol.md").read_text()


def test_a_run_where_no_agent_plays_a_track_asked_for_is_refused(tmp_path, capsys):
    config = tmp_path / "eval.yaml"
    config.write_text(f"agents: [{{name: exec, path: {EXAMPLES / 'last_kb.js'}, track: privileged}}]\n"
                      "regimes: [breaking]\nlengths: [100]\ntracks: [unprivileged]\n")
    code, _, err = wpb(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert code == 2 and "no agent plays unprivileged" in err and "an agent plays the track it declares" in err
    assert not (tmp_path / "run").exists()


def test_a_script_without_its_interpreter_line_is_named(tmp_path):
    script = tmp_path / "agent.py"
    script.write_text("print('hi')\n")
    script.chmod(0o755)
    agent = ExecAgent(path=str(script))
    episode = generate_episode(make_config("breaking", length=90), seed=0, index=0)
    with pytest.raises(ProgramError, match="a script needs a #! line naming its interpreter"):
        run_episode(agent, episode, 2048)


@pytest.mark.skipif(problem() is not None, reason="needs the sandbox of isolated evaluation (Linux namespaces)")
def test_an_exec_agent_declared_privileged_plays_the_privileged_track(tmp_path, capsys):
    # It writes a step only when it is shown the step's priority hint.
    agent = program(tmp_path, """
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        print(json.dumps({"protocol": "wpb-agent/1"}), flush=True)
    elif message["type"] == "step":
        hinted = "priority" in message["metadata"]
        print(json.dumps({"actions": [{"op": "WRITE"}] if hinted else []}), flush=True)
""")
    config = tmp_path / "eval.yaml"
    config.write_text(f"agents: [{{name: exec, path: {agent}, track: privileged, label: hinted}}]\n"
                      "regimes: [breaking]\nlengths: [100]\nbudgets: [1024]\nepisodes_per_condition: 1\n")
    code, _, err = wpb(capsys, "eval", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    with (tmp_path / "run" / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["policy"], r["track"]) for r in rows] == [("hinted", "privileged")]
    assert int(rows[0]["write_actions"]) > 0  # it was shown the hints


# Writes each step compressed while that fits the room left, else skips: what compressed_bytes
# and memory.bytes_used say is all it needs.
COMPRESSOR = """
for line in sys.stdin:
    message = json.loads(line)
    if message["type"] == "hello":
        print(json.dumps({"protocol": "wpb-agent/1"}), flush=True)
    elif message["type"] == "step":
        small, memory = message["compressed_bytes"], message["memory"]
        fits = small is not None and memory["bytes_used"] + small <= memory["budget_bytes"]
        print(json.dumps({"actions": [{"op": "WRITE", "codec": "summary/1"}] if fits else []}), flush=True)
"""


class PythonCompressor:
    """COMPRESSOR as a Python policy."""

    name = "python_compressor"

    def select(self, step, store):
        from wpb_gym.core.compression import compressed_cost

        small = compressed_cost(step)
        if small is not None and small <= store.remaining():
            yield MemoryAction.write_compressed(step)


def test_an_exec_agent_writes_compressed_as_a_python_policy_does(tmp_path):
    from wpb_gym.core.compression import Compression

    episode = generate_episode(make_config("contract_mix", length=120), 2)
    agent = ExecAgent(path=str(program(tmp_path, COMPRESSOR)))
    try:
        ours = run_episode(agent, episode, 2048, compression=Compression(0.75))
    finally:
        agent.close()
    theirs = run_episode(PythonCompressor(), episode, 2048, compression=Compression(0.75))
    assert ours.store.compressed_timesteps() == theirs.store.compressed_timesteps() == ours.store.timesteps()
    assert ours.store.timesteps() and ours.metrics.as_row() == theirs.metrics.as_row()
    # Without compression the same program's writes are refused, and counted so.
    agent = ExecAgent(path=str(program(tmp_path, COMPRESSOR, name="again.py")))
    try:
        plain = run_episode(agent, episode, 2048)
    finally:
        agent.close()
    assert len(plain.store) == 0 and plain.store.rejected_counts["WRITE"] == 0  # compressed_bytes is null: it skips


@pytest.mark.skipif(problem() is not None, reason="needs the sandbox of isolated evaluation (Linux namespaces)")
def test_wpb_eval_runs_an_exec_agent_under_compression(tmp_path, capsys):
    agent = program(tmp_path, COMPRESSOR)
    out = tmp_path / "run"
    code, _, err = wpb(capsys, "eval", "--agents", f"exec:{agent}", "--regimes", "contract_mix", "--lengths", 100,
                       "--budgets", "1KB", "--episodes-per-condition", 2, "--compression", "credit=0.75",
                       "--out", out, "--quiet")
    assert code == 0, err
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and all(r["compression"] == "credit=0.75" and r["error"] == "" for r in rows)
    assert all(int(r["write_actions"]) > 0 and r["rejected_actions"] == "0" for r in rows)
