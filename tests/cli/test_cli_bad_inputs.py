"""Every other bad input: each exits 2 with one line naming the option, setting or file, and no traceback."""

from __future__ import annotations

import pytest
from test_cli_safety import TINY, refused, snapshot

# ---------------------------------------------------------------------------- every other bad input

EVAL, TRAIN, EVENTS = ["eval", *TINY], ["train", "--algo", "ppo"], ["episodes", "from-events"]
EVAL_C = ["eval", "--config", "{w}/c.yaml", "--out", "{w}/o"]
# Episodes read from files take none of the settings of generated ones.
EVAL_FILES = ["eval", "--agents", "fifo_store_all", "--budgets", "1024", "--tracks", "unprivileged", "--quiet"]
TRAIN_C = [*TRAIN, "--config", "{w}/c.yaml", "--out", "{w}/t"]
ABLATE, ABLATE_C = ["ablate", "{w}/c.yaml", "{w}/c.yaml"], {"c.yaml": "agents: [last_kb]\n"}
INGEST = ["ingest", "openapi", "--repo", "{w}", "--spec", "a.json", "--quiet"]


def case(what: str, argv: list[str], named: str, files: dict[str, str | bytes] | None = None):
    """A bad input: ``argv`` (``{w}``: the test's folder, ``{runs}``: the module's runs), the files
    to write first, and what the error line must name."""
    return pytest.param(files or {}, argv, named, id=what)


BAD_INPUTS = [
    case("eval: a unit without a number", [*EVAL, "--budgets", "KB", "--out", "{w}/o"], "--budgets"),
    case("eval: fractional bytes", [*EVAL, "--budgets", "1.3KB", "--out", "{w}/o"], "--budgets"),
    case("eval: a time limit that rounds to 0, no limit", [*EVAL, "--max-seconds-per-step", "1e-400", "--out", "{w}/o"],
         "--max-seconds-per-step"),
    case("eval: the same in a config", EVAL_C, "max_seconds_per_step", {"c.yaml": "max_seconds_per_step: 1e-400\n"}),
    case("eval: a YAML float that rounds to 0", EVAL_C, "c.yaml:1:23", {"c.yaml": "max_seconds_per_step: 1.0e-400\n"}),
    case("eval: other digits", [*EVAL, "--max-seconds-per-step", "\uff11e-400", "--out", "{w}/o"], "--max-seconds"),
    case("eval: a tag its value does not fit", EVAL_C, "c.yaml:1:10", {"c.yaml": "isolate: !!bool maybe\n"}),
    case("eval: an empty tagged float", EVAL_C, "c.yaml:1:23", {"c.yaml": "max_seconds_per_step: !!float\n"}),
    case("eval: a tagged int in a list", EVAL_C, "c.yaml:1:14", {"c.yaml": "budgets: [1, !!int x]\n"}),
    case("train: an env value too small for a float", [*TRAIN, "--env-kwargs", "expire_cost=1e-400", "--out", "{w}/o"],
         "--env-kwargs"),
    case("train: the same in a config", ["train", "--algo", "ppo", "--config", "{w}/t.yaml", "--out", "{w}/o"],
         "expire_cost", {"t.yaml": "env:\n  expire_cost: 1e-400\n"}),
    case("train: a misspelt regime", [*TRAIN, "--env-kwargs", "regime=contract_mx", "--out", "{w}/o"],
         "--env-kwargs: regime: unknown regime 'contract_mx' (did you mean 'contract_mix'?)"),
    case("train: a real-drift regime without its files", [*TRAIN, "--env-kwargs", "regime=real:strip", "--out", "{w}/o"],
         "--env-kwargs: regime: 'real:strip' names real-drift episodes, which come from files: give them with "
         "episodes=PATH"),
    case("dataset: a misspelt regime", ["dataset", "--agent", "change_detector", "--dataset-id", "wpb/x/t-v0",
                                        "--env-kwargs", "regime=breakng", "--out", "{w}/d"],
         "--env-kwargs: regime: unknown regime 'breakng' (did you mean 'breaking'?)"),
    case("freeze: a --set value too small for a float", ["freeze", "--set", "drift_prob=1e-400", "--out", "{w}/s"],
         "--set"),
    case("eval: config is a folder", ["eval", "--config", "{w}", "--out", "{w}/o"], "{w}"),
    case("eval: config is empty", EVAL_C, "agents", {"c.yaml": ""}),
    case("eval: config is a list", EVAL_C, "c.yaml", {"c.yaml": "- a\n"}),
    case("eval: config not UTF-8", EVAL_C, "c.yaml", {"c.yaml": b"agents: [\xff]\n"}),
    case("eval: config bad YAML", EVAL_C, "c.yaml:2", {"c.yaml": "agents: [\n"}),
    case("eval: unknown setting", EVAL_C, "agents", {"c.yaml": "agent: [x]\n"}),
    case("eval: lengths a word", EVAL_C, "lengths", {"c.yaml": "agents: [last_kb]\nlengths: abc\n"}),
    case("eval: length 0 in YAML", EVAL_C, "lengths", {"c.yaml": "agents: [last_kb]\nlengths: [0]\n"}),
    case("eval: huge length", [*EVAL, "--lengths", "100000000000000000000", "--out", "{w}/o"], "--lengths"),
    # The contract regimes open with a warm-up of their 64 endpoints: a shorter length is refused.
    case("eval: too short for the warm-up", [*EVAL, "--regimes", "breaking", "--lengths", "30", "--out", "{w}/o"],
         "--lengths with --regimes: GeneratorConfig.length: regime 'breaking'"),
    case("eval: too short in YAML", EVAL_C, "'lengths:' in {w}/c.yaml with 'regimes:' in {w}/c.yaml",
         {"c.yaml": "agents: [last_kb]\nregimes: [default, reverts]\nlengths: [40]\n"}),
    case("train: too short for the warm-up", [*TRAIN, "--env-kwargs", "regime=reverts", "length=40", "--out", "{w}/t"],
         "regime 'reverts' opens with a warm-up"),
    case(
        "eval: episodes_per_condition a word",
        EVAL_C,
        "episodes_per_condition",
        {"c.yaml": "agents: [last_kb]\nepisodes_per_condition: x\n"},
    ),
    case("eval: negative seed in YAML", EVAL_C, "seed", {"c.yaml": "agents: [last_kb]\nseed: -1\n"}),
    case("eval: jobs 0 in YAML", EVAL_C, "jobs", {"c.yaml": "agents: [last_kb]\njobs: 0\n"}),
    case("eval: jobs 0 flag", [*EVAL, "--jobs", "0", "--out", "{w}/o"], "--jobs"),
    case("eval: tracks a number", EVAL_C, "tracks", {"c.yaml": "agents: [last_kb]\ntracks: 5\n"}),
    case("eval: regimes null", EVAL_C, "regimes", {"c.yaml": "agents: [last_kb]\nregimes: null\n"}),
    case("eval: agents a number", EVAL_C, "agents", {"c.yaml": "agents: 5\n"}),
    case("eval: agent with a bad parameter", EVAL_C, "seed", {"c.yaml": "agents: [{name: random, seed: abc}]\n"}),
    case("eval: agent with an unknown parameter", EVAL_C, "bogus", {"c.yaml": "agents: [{name: random, bogus: 1}]\n"}),
    case("eval: agent label a list", EVAL_C, "label", {"c.yaml": "agents: [{name: random, label: [1]}]\n"}),
    case("eval: episodes a number", EVAL_C, "episodes", {"c.yaml": "agents: [last_kb]\nepisodes: 5\n"}),
    case("eval: sb3 model a folder", [*EVAL, "--agents", "sb3:{w}", "--out", "{w}/o"], "sb3:"),
    case("eval: sb3 model not a zip", [*EVAL, "--agents", "sb3:{w}/m.zip", "--out", "{w}/o"], "m.zip", {"m.zip": "no"}),
    case(
        "eval: episodes not UTF-8",
        [*EVAL_FILES, "--episodes", "{w}/e.jsonl", "--out", "{w}/o"],
        "e.jsonl",
        {"e.jsonl": b"\xff\xfe{}\n"},
    ),
    case(
        "eval: episodes not gzip",
        [*EVAL_FILES, "--episodes", "{w}/e.jsonl.gz", "--out", "{w}/o"],
        "e.jsonl.gz",
        {"e.jsonl.gz": "hello"},
    ),
    case(
        "eval: episodes an empty folder",
        [*EVAL_FILES, "--episodes", "{w}/d", "--out", "{w}/o"],
        "{w}/d",
        {"d/.keep": ""},
    ),
    case("eval: results.csv a folder", [*EVAL, "--out", "{w}/o", "--force"], "results.csv", {"o/results.csv/x": ""}),
    case("inspect: not UTF-8", ["inspect", "{w}/e.jsonl"], "e.jsonl", {"e.jsonl": b"\xff\xfe{}\n"}),
    case("inspect: not gzip", ["inspect", "{w}/e.jsonl.gz"], "e.jsonl.gz", {"e.jsonl.gz": "hello"}),
    case("inspect: unknown track", ["inspect", "{w}/e.jsonl", "--tracks", "oracle"], "--tracks", {"e.jsonl": ""}),
    case("report: run is a file", ["report", "{w}/f", "--paper-tables"], "f", {"f": "x"}),
    case("report: results.csv a folder", ["report", "{w}/r", "--paper-tables"], "results.csv", {"r/results.csv/x": ""}),
    case(
        "report: results.csv not UTF-8",
        ["report", "{w}/r", "--f1-by-budget"],
        "results.csv",
        {"r/results.csv": b"\xff\xfe"},
    ),
    case(
        "report: results.csv without rows",
        ["report", "{w}/r", "--f1-by-budget"],
        "results.csv",
        {"r/results.csv": "x\n"},
    ),
    case(
        "report: diagnostics budget not in the run",
        ["report", "{runs}/both", "--paper-tables", "--diagnostics-budget", "2KB"],
        "--diagnostics-budget",
    ),
    case("report: unknown highlight", ["report", "{runs}/both", "--headroom", "--highlight", "nobody"], "--highlight"),
    case("report: transfer from a missing run", ["report", "{runs}/both", "--transfer", "{w}/none"], "none"),
    case(
        "compare: unknown --agents",
        ["compare", "{runs}/both", "{runs}/unprivileged", "--agents", "nobody"],
        "--agents",
    ),
    case("compare: a run that is a file", ["compare", "{w}/f", "{runs}/both"], "f", {"f": "x"}),
    case("baseline: store is a file", ["baseline", "set", "{runs}/both", "--store", "{w}/f"], "--store", {"f": "x"}),
    case(
        "ablate: --out a folder",
        ["ablate", "{w}/c.yaml", "{w}/c.yaml", "--out", "{w}"],
        "--out",
        {"c.yaml": "agents: [last_kb]\n"},
    ),
    case(
        "ablate: second config bad",
        ["ablate", "{w}/c.yaml", "{w}/d.yaml"],
        "lastkb",
        {"c.yaml": "agents: [last_kb]\n", "d.yaml": "agents: [lastkb]\n"},
    ),
    case("freeze: repeated length", ["freeze", "--lengths", "20,20", "--out", "{w}/s"], "--lengths"),
    case("events: a folder", [*EVENTS, "{w}", "--source", "s", "--out", "{w}/s"], "{w}"),
    case("events: missing", [*EVENTS, "{w}/none.jsonl", "--source", "s", "--out", "{w}/s"], "none.jsonl"),
    case(
        "events: not gzip",
        [*EVENTS, "{w}/e.jsonl.gz", "--source", "s", "--out", "{w}/s"],
        "e.jsonl.gz",
        {"e.jsonl.gz": "hello"},
    ),
    case(
        "events: not UTF-8",
        [*EVENTS, "{w}/e.jsonl", "--source", "s", "--out", "{w}/s"],
        "e.jsonl",
        {"e.jsonl": b"\xff\xfe"},
    ),
    case(
        "events: a line nested 3,000 levels deep, once a raw RecursionError",
        [*EVENTS, "{w}/e.jsonl", "--source", "s", "--out", "{w}/s"],
        "e.jsonl:1: nested more than 100 levels deep",
        {"e.jsonl": '{"seq": 0, "x": ' + "[" * 3000 + "]" * 3000 + "}\n"},
    ),
    case(
        "events: a line nested 500 levels deep",
        [*EVENTS, "{w}/e.jsonl", "--source", "s", "--out", "{w}/s"],
        "e.jsonl:1: nested more than 100 levels deep",
        {"e.jsonl": '{"seq": 0, "x": ' + "[" * 500 + "]" * 500 + "}\n"},
    ),
    case("ingest: --out a folder", ["ingest", "openapi", "--repo", "{w}", "--spec", "a.json", "--out", "{w}"], "--out"),
    case("train: --env-kwargs bad YAML", [*TRAIN, "--env-kwargs", "slots=[", "--out", "{w}/t"], "slots"),
    case("train: --env-kwargs repeated", [*TRAIN, "--env-kwargs", "slots=2", "slots=3", "--out", "{w}/t"], "slots"),
    case("train: negative budget", [*TRAIN, "--env-kwargs", "budget_bytes=-1", "--out", "{w}/t"], "budget_bytes"),
    case("train: a section worth more than the oracle sums", [*TRAIN, "--env-kwargs", "doc_utility=2.0e+12", "--out",
                                                             "{w}/t"], "doc_utility: expected at most 1e+12"),
    case("train: config env a list", TRAIN_C, "env", {"c.yaml": "env: [1]\n"}),
    case("train: config n_envs a word", TRAIN_C, "n_envs", {"c.yaml": "n_envs: abc\n"}),
    case("train: config eval a word", TRAIN_C, "eval", {"c.yaml": "eval: abc\n"}),
    case("train: config env unknown key", TRAIN_C, "budget_bytes", {"c.yaml": "env: {budget: 1}\n"}),
    case(
        "train: unknown hyperparameter",
        [*TRAIN_C, "--timesteps", "8", "--quiet"],
        "bogus",
        {"c.yaml": "hyperparams: {bogus: 1}\n"},
    ),
    case(
        "train: hyperparameter of a wrong type",
        [*TRAIN_C, "--timesteps", "8", "--quiet"],
        "c.yaml: hyperparams.learning_rate: 'abc' for ppo: expected a number",
        {"c.yaml": "hyperparams: {learning_rate: abc}\n"},
    ),
    case("no subcommand", [], "wpb"),
    case("eval: --out empty", [*EVAL, "--out", ""], "--out"),
    case("eval: episodes path with NUL", EVAL_C, "episodes", {"c.yaml": 'agents: [last_kb]\nepisodes: "a\\0b"\n'}),
    case("eval: sb3 without a path", [*EVAL, "--agents", "x=sb3:", "--out", "{w}/o"], "sb3:PATH"),
    case("eval: YAML python tag", EVAL_C, "c.yaml:1", {"c.yaml": "agents: !!python/object/apply:os.system [ls]\n"}),
    case("eval: YAML setting names not text", EVAL_C, "setting names", {"c.yaml": "1: 2\n"}),
    case("eval: budgets a mapping", EVAL_C, "budgets", {"c.yaml": "agents: [last_kb]\nbudgets: {a: 1}\n"}),
    case("eval: budget true", EVAL_C, "budgets", {"c.yaml": "agents: [last_kb]\nbudgets: [true]\n"}),
    case("eval: seed 1.5", EVAL_C, "seed", {"c.yaml": "agents: [last_kb]\nseed: 1.5\n"}),
    case("ablate: --out under a file", [*ABLATE, "--out", "{w}/f/x.md"], "--out", {"f": "x", **ABLATE_C}),
    case("ingest: --out under a file", [*INGEST, "--out", "{w}/f/o.jsonl"], "--out", {"f": "x"}),
    case(
        "train: held-out episodes not UTF-8",
        [*TRAIN, "--eval-episodes", "{w}/e.jsonl", "--out", "{w}/t"],
        "e.jsonl",
        {"e.jsonl": b"\xff"},
    ),
    case("train: sb3 policy unknown", TRAIN_C, "Bogus", {"c.yaml": "policy: Bogus\n"}),
]


@pytest.mark.parametrize(("files", "argv", "named"), BAD_INPUTS)
def test_every_bad_input_exits_2_with_one_line_naming_the_option_or_file(tmp_path, capsys, runs, files, argv, named):
    for name, content in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    before = snapshot(runs)
    line = refused(capsys, *[a.format(w=tmp_path, runs=runs) for a in argv])
    assert named.format(w=tmp_path, runs=runs) in line, line
    assert snapshot(runs) == before
    assert not (tmp_path / "o").exists() or (tmp_path / "o" / "results.csv" / "x").exists()
    assert not (tmp_path / "t").exists() and not (tmp_path / "s").exists()
