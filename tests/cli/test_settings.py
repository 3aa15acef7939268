"""One settings object per command: defaults, then ``--config``, then flags, merged in one place."""

from __future__ import annotations

import argparse
import json
from functools import partial

import pytest

from wpb_gym.cli import build_parser, main
from wpb_gym.cli.eval_settings import EVAL, RECORDED
from wpb_gym.cli.settings import CommandSettings, Setting, Settings, switch
from wpb_gym.core.checks import InputError
from wpb_gym.core.setting_values import parse_int
from wpb_gym.core.version import __version__

# Where the tasks run never changes results, nor where the seed file lies (its seed is recorded),
# nor which model files are accepted (run.json says so apart).
# kind_budgets, write_time and compression are recorded only when given, so that runs without it keep their checkpoint key.
NOT_RECORDED = {"jobs", "backend", "address", "seed_file", "data_only_models", "kind_budgets", "write_time", "compression"}


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(words, subparser) of every ``wpb`` command, nested ones included."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, (*prefix, name))
    if prefix and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        yield prefix, parser


ALL = list(commands(build_parser()))


def test_every_command_declares_one_settings_table():
    names = [" ".join(words) for words, _ in ALL]
    assert len(names) == 18, names
    for words, parser in ALL:
        table = parser.get_default("settings")
        assert isinstance(table, CommandSettings), words
        assert table.command == "wpb " + " ".join(words)
        options = {o for a in parser._actions for o in a.option_strings} | {
            a.dest for a in parser._actions if not a.option_strings
        }
        for setting in table.settings:  # every setting is reachable from the command line
            assert setting.option in options or setting.name in options, (words, setting.name)


@pytest.mark.parametrize("words", [w for w, p in ALL if p.get_default("settings").config], ids=" ".join)
def test_a_config_key_the_command_does_not_know_is_refused_with_the_known_ones(tmp_path, capsys, words):
    table = dict(ALL)[words].get_default("settings")
    config = tmp_path / "c.yaml"
    config.write_text("no_such_setting: 1\n")
    code = main([*words, "--config", str(config)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "unknown setting(s) ['no_such_setting']" in err
    for name in table.known_in_config():
        assert repr(name) in err
    line_only = [s.name for s in table.settings if not s.in_config]
    if line_only:
        config.write_text(f"{line_only[0]}: x\n")
        assert main([*words, "--config", str(config)]) == 2
        assert "can only be given on the command line" in capsys.readouterr().err


TABLE = CommandSettings(
    "wpb demo",
    (
        Setting("seed", partial(parse_int, minimum=0), "a seed", default=0),
        Setting("count", partial(parse_int, minimum=1), "a count", required=True),
        switch("isolate", "a switch"),
        Setting("counts", partial(parse_int, minimum=0), "repeatable", many=True, repeat=True),
        Setting("out", str, "where", in_config=False),
    ),
)


def parse(tmp_path, text: str | None, *argv: str) -> Settings:
    parser = argparse.ArgumentParser()
    TABLE.add_to(parser)
    if text is not None:
        (tmp_path / "c.yaml").write_text(text)
        argv = ("--config", str(tmp_path / "c.yaml"), *argv)
    return TABLE.resolve(parser.parse_args(argv))


def test_defaults_then_the_config_then_the_flags(tmp_path):
    settings = parse(tmp_path, None, "--count", "2")
    assert dict(settings) == {"seed": 0, "count": 2, "isolate": False, "counts": None, "out": None}
    assert settings.origin_of("seed") == "default" and settings.origin_of("count") == "--count"
    settings = parse(tmp_path, "seed: 5\ncount: 3\nisolate: true\ncounts: [1, 2]\n")
    assert (settings.seed, settings.count, settings.isolate, settings.counts) == (5, 3, True, [1, 2])
    assert settings.origin_of("seed").startswith("'seed:' in ") and settings.origin_of("seed").endswith("c.yaml")
    settings = parse(tmp_path, "seed: 5\ncount: 3\nisolate: true\n", "--seed", "7", "--no-isolate", "--counts", "4")
    assert (settings.seed, settings.count, settings.isolate, settings.counts) == (7, 3, False, [4])
    assert settings.origin_of("seed") == "--seed"


def test_a_value_is_checked_alike_from_a_flag_and_from_the_config(tmp_path, capsys):
    with pytest.raises(InputError, match=r"c.yaml: seed: expected an integer >= 0, got -1"):
        parse(tmp_path, "seed: -1\ncount: 1\n")
    with pytest.raises(SystemExit):
        parse(tmp_path, None, "--count", "1", "--seed", "-1")
    assert "argument --seed: expected an integer >= 0, got -1" in capsys.readouterr().err
    with pytest.raises(InputError, match=r"c.yaml: counts: expected an integer >= 0, got -3"):
        parse(tmp_path, "count: 1\ncounts: [1, -3]\n")
    with pytest.raises(InputError, match=r"c.yaml: isolate: expected true or false, got 'maybe'"):
        parse(tmp_path, "count: 1\nisolate: maybe\n")


def test_a_required_setting_names_its_flag_and_its_key(tmp_path):
    with pytest.raises(InputError, match=r"^--count \(or 'count:' in --config FILE\) is required"):
        parse(tmp_path, None)
    with pytest.raises(InputError, match=r"\['out'\] can only be given on the command line \(--out\)"):
        parse(tmp_path, "count: 1\nout: elsewhere\n")


def test_settings_are_read_only_and_their_names_cannot_hide_its_methods(tmp_path):
    settings = parse(tmp_path, None, "--count", "2")
    with pytest.raises(AttributeError, match="read-only"):
        settings.seed = 3
    with pytest.raises(TypeError):
        settings["seed"] = 3  # type: ignore[index]
    with pytest.raises(AttributeError, match="no setting 'sede'"):
        settings.sede  # noqa: B018
    with pytest.raises(ValueError, match=r"names of Settings' own methods"):
        CommandSettings("wpb bad", (Setting("items", str, "x"),))
    with pytest.raises(ValueError, match="declared twice"):
        CommandSettings("wpb bad", (Setting("a", str, "x"), Setting("a", str, "y")))


def test_eval_records_and_hashes_the_same_settings_from_flags_or_a_config(tmp_path, capsys):
    flags = ["--agents", "fifo_store_all,no_mem", "--lengths", "20", "--episodes-per-condition", "2"]
    flags += ["--budgets", "1KB", "--quiet"]
    assert main(["eval", *flags, "--out", str(tmp_path / "flags")]) == 0
    config = tmp_path / "c.yaml"
    config.write_text("agents: [fifo_store_all, no_mem]\nlengths: 20\nepisodes_per_condition: 2\nbudgets: 1KB\n")
    assert main(["eval", "--config", str(config), "--quiet", "--out", str(tmp_path / "yaml")]) == 0
    runs = [json.loads((tmp_path / name / "run.json").read_text()) for name in ("flags", "yaml")]
    assert runs[0]["config_hash"] == runs[1]["config_hash"]
    assert runs[0]["config"] == runs[1]["config"]
    # Generated episodes also record the package that made them (a resume under another version
    # that made other episodes has another checkpoint key).
    assert runs[0]["config"].pop("generated_by") == f"wpb_gym {__version__}"
    assert set(runs[0]["config"]) == set(RECORDED) == {s.name for s in EVAL.settings if s.in_config} - NOT_RECORDED
    capsys.readouterr()


def test_freeze_reads_its_generator_overrides_from_a_config_as_a_mapping(tmp_path, capsys):
    argv = ["freeze", "--regimes", "default", "--lengths", "20", "--episodes", "2"]
    assert main([*argv, "--set", "priority_noise=0.2", "--out", str(tmp_path / "flags")]) == 0
    config = tmp_path / "freeze.yaml"
    config.write_text("regimes: [default]\nlengths: [20]\nepisodes: 2\nset: {priority_noise: 0.2}\n")
    assert main(["freeze", "--config", str(config), "--out", str(tmp_path / "yaml")]) == 0
    manifests = [(tmp_path / name / "MANIFEST.json").read_text() for name in ("flags", "yaml")]
    assert manifests[0] == manifests[1] and '"priority_noise": 0.2' in manifests[0]
    config.write_text("set: {no_such_option: 1}\n")
    assert main(["freeze", "--config", str(config), "--out", str(tmp_path / "bad")]) == 2
    assert "freeze.yaml: set: unknown generator option 'no_such_option'" in capsys.readouterr().err


def test_freeze_names_where_a_generator_value_it_refuses_came_from(tmp_path, capsys):
    out = ["--out", str(tmp_path / "set")]
    assert main(["freeze", "--set", "api_pool=0", *out]) == 2
    assert "error: regime default, length 200 with the options of --set: api_pool: expected >= 1, got 0" in (
        capsys.readouterr().err)
    config = tmp_path / "freeze.yaml"
    config.write_text("regimes: [default, breaking]\nset: {warmup: true}\n")
    assert main(["freeze", "--config", str(config), *out]) == 2
    assert f"error: regime default, length 200 with the options of 'set:' in {config}: warmup: only the" in (
        capsys.readouterr().err)
    assert main(["freeze", "--config", str(config), "--set", "api_pool=2", *out]) == 2  # both: both named
    assert f"of 'set:' in {config} and --set: warmup:" in capsys.readouterr().err
    # Checked at the lengths asked for: 500 endpoints need more than 500 steps for their warm-up
    long = ["freeze", "--regimes", "breaking", "--set", "api_pool=500", "--episodes", "1"]
    assert main([*long, "--lengths", "501", *out]) == 0
    assert main([*long, "--lengths", "501,50", "--out", str(tmp_path / "short")]) == 2
    assert "error: regime breaking, length 50 with the options of --set: length: regime" in capsys.readouterr().err
    assert not (tmp_path / "short").exists()
    assert main(["freeze", "--regimes", "breaking", "--lengths", "30", *out]) == 2  # no --set: none named
    assert "error: regime breaking, length 30: length: regime 'breaking' opens" in capsys.readouterr().err


def test_report_needs_exactly_one_table(tmp_path, capsys, runs):
    run = runs / "both"
    assert main(["report", str(run)]) == 2
    assert "give exactly one of --paper-tables, --headroom, --f1-by-budget, --transfer (got none)" in (
        capsys.readouterr().err
    )
    config = tmp_path / "r.yaml"
    config.write_text("headroom: true\n")
    assert main(["report", str(run), "--config", str(config), "--f1-by-budget"]) == 2
    assert "(got 'headroom:' in " in capsys.readouterr().err
    assert main(["report", str(run), "--config", str(config)]) == 0
    assert (run / "headroom.md").is_file()


@pytest.mark.parametrize("text", ["0", "0.0", "0e0", "-0", " 0 ", "00", ".0", "0.", "+0", "0E1", "0e-400", "1e-300",
                                  "inf", "nan", "x", "1:30"])
def test_only_a_number_written_too_small_for_a_float_underflows(text):
    from wpb_gym.core.setting_values import underflows

    assert not underflows(text)


def test_a_number_written_too_small_for_a_float_underflows():
    from wpb_gym.core.setting_values import underflows

    assert underflows("1e-400") and underflows(" -2.5E-999 ") and underflows("\uff11e-400")
