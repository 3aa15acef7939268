"""``wpb eval`` and ``wpb ablate``: running agents over episodes, budgets and tracks."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence

from ..core.atomic_files import write_atomic
from ..core.checks import InputError
from ..core.csv_cells import FORMULA_RULE, formula_start
from ..core.file_names import name_part
from ..core.messages import did_you_mean, one_line
from ..core.policy import POLICY_TRACKS
from ..core.version import __version__
from ..evaluation.isolated.sandbox import AUTO, isolation_level
from ..evaluation.run_folder import check_folder_path
from .eval_settings import (
    ABLATE,
    DRAW,
    DRAWN_SEED_BITS,
    EVAL,
    GENERATED_ONLY,
    eval_config_file,
    read_seed_file,
    recorded_settings,
    run_limits,
    sandbox_of,
    seed_fingerprint,
    store_limits,
)
from .inputs import read_placed_episode_source
from .settings import Settings


def agent_item(item: Any) -> tuple[str, str | None, dict[str, Any]]:
    """An agent entry of ``--agents`` or a config read as (registry name, label or None,
    parameters): a name or alias, ``LABEL=NAME:PATH``, ``NAME:PATH`` (the path becomes the
    ``path`` parameter) or a mapping with ``name``, ``label`` and parameters."""
    if isinstance(item, dict):
        params = dict(item)
        name, label = params.pop("name", None), params.pop("label", None)
        if not isinstance(name, str):
            raise InputError(f"an agent given as a mapping needs 'name': {item!r}")
    elif isinstance(item, str):
        name, label, params = item, None, {}
        prefix, sep, rest = item.partition("=")
        if sep and ":" in rest and prefix:
            name, label = rest, prefix
    else:
        raise InputError(f"an agent is a name or a mapping with 'name', got {item!r}")
    head, colon, path = name.partition(":")
    if colon:  # NAME:PATH, an agent read from a file or folder: a trained model or learner
        if not path:
            what = {"rllib": "an RLlib checkpoint folder", "policy": "an exported policy folder"}.get(head, "a file")
            raise InputError(f"agent {item!r}: {head}:PATH needs the path of {what}")
        params["path"] = path
        name, label = head, label or f"{head}:{Path(path).stem}"
    return name, label, params


def external_agents(names: Sequence[Any]) -> list[str]:
    """The agents among ``names`` that are other programs (``exec:PATH``), as given."""
    from agents.base import EXTERNAL_KINDS  # the CLI joins the packages
    from agents.registry import agent_entry

    found = []
    for item in names:
        name, _, params = agent_item(item)
        try:
            if agent_entry(name).kind in EXTERNAL_KINDS:
                found.append(item if isinstance(item, str) else f"{name}:{params.get('path')}")
        except KeyError:
            continue  # policy_specs names an unknown agent
    return found


def default_label(name: str, params: dict[str, Any]) -> str:
    """An agent's label in tables when none is given: its name, with its parameters if any."""
    return name + (f"({', '.join(f'{k}={v!r}' for k, v in params.items())})" if params else "")


def learned_labels(names: Sequence[Any]) -> set[str]:
    """The labels of the learned agents (learners and trained models) among a run's agents."""
    from agents.base import MODEL_KINDS  # the CLI joins the packages
    from agents.registry import agent_entry

    learned = set()
    for item in names:
        name, label, params = agent_item(item)
        try:
            entry = agent_entry(name)
        except KeyError:
            continue  # an agent this install does not know cannot be told apart; the run names it
        if entry.kind == "learner" or entry.kind in MODEL_KINDS:
            learned.add(label or default_label(entry.name, params))
    return learned


def trained_limits(item: Any, spec: Any, isolated: bool) -> tuple[tuple[str, ...], Any]:
    """The limits beside the budget the agent of ``item`` was trained under (isolated: as its
    process said), and the agent if it was built here (None). Only a saved SB3 model or an
    exported policy is built again (an RLlib one would cost the most; ``wpb train`` does not
    train those under limits)."""
    from agents.registry import agent_entry  # the CLI joins the packages

    if isolated:
        return spec.trained_limits, None
    if agent_entry(agent_item(item)[0]).kind not in ("sb3", "policy"):
        return (), None
    agent = spec.factory()
    return agent.trained_limits, agent


def _refuse_misplaced_models(config: Settings, policies: list[Any], where: str | None = None) -> None:
    """A model trained under a limit beside the budget is evaluated under it. A model of the query
    tier's own env decides in that env: on its regimes, without limits beside the budget
    (isolated, its process says so in one line itself). ``where``: the config file of an
    ablation's variant (None: ``wpb eval``'s settings)."""
    from ..core.store_limits import LIMIT_NAMES
    from ..episodes.generators.queries import QUERY_REGIMES

    for item, spec in zip(config["agents"], policies, strict=True):
        trained, agent = trained_limits(item, spec, config["isolate"])
        missing = [name for name in trained if config[name] is None]
        if missing:
            name = missing[0]
            give = (f"give '{name}:' in {where} too" if where is not None else
                    f"evaluate it under that limit too (--{name.replace('_', '-')}, or '{name}:' in a --config file)")
            raise InputError(f"{where + ': ' if where else ''}agent {spec.label!r} was trained with {name}=; {give}, "
                             "with the values of your choice")
        if agent is None or not getattr(agent, "query_tier", False):
            continue
        given = [name for name in LIMIT_NAMES if config[name] is not None]
        if given:
            raise InputError(f"{config.origin_of(given[0])}: agent {spec.label!r} decides in the query tier's env, "
                             f"which has no {given[0]}: evaluate it without it")
        others = [] if config["episodes"] is not None else [r for r in config["regimes"] if r not in QUERY_REGIMES]
        if others:
            raise InputError(f"{config.origin_of('regimes')}: agent {spec.label!r} decides in the query tier's env, "
                             f"which plays the query tier's regimes only, not {', '.join(others)}")


def policy_specs(names: Sequence[Any], isolate: bool = False, limits: Any = None, sandbox: Any = AUTO) -> list[Any]:
    """Grid policies from agent entries: a name or alias, ``NAME:PATH`` for an agent read from a file
    or folder (``sb3:MODEL.zip``, ``epsilon_greedy:learner.json``, ``rllib:CHECKPOINT``;
    ``LABEL=NAME:PATH`` to name it),
    or (in YAML) a mapping ``{name: ..., label: ..., <parameter>: <value>...}`` for an agent with
    other parameters. Each agent is built once to check its parameters: here, or, with
    ``isolate``, in its own process (in ``sandbox``, as ``run_grid`` takes it; an agent's code
    never runs in this one)."""
    from functools import partial

    from agents.base import EXTERNAL_KINDS, MODEL_KINDS  # the CLI joins the packages
    from agents.registry import agent_entry, make_agent

    from ..evaluation.grid import PolicySpec

    external = external_agents(names)
    if external and not isolate:
        raise InputError(f"agent {external[0]!r}: another program is only ever run isolated, in the sandbox "
                         "(wpb eval runs it so; in an eval config, isolate: true)")
    specs = []
    for item in names:
        name, label, params = agent_item(item)
        try:
            entry = agent_entry(name)
            factory = partial(make_agent, entry.name, **params)
            # Isolated: the registry's word on the track (a model's is its file's, read in its process).
            track = (entry.track if entry.track in POLICY_TRACKS else None) if isolate else factory().track
        except (KeyError, TypeError, ValueError, OSError, AttributeError, ImportError) as error:
            hint = did_you_mean(name, _agent_names()) if isinstance(error, KeyError) else ""
            raise InputError(f"agent {item!r}: {error.args[0] if error.args else error}{hint}") from None
        if label is None:
            label = default_label(entry.name, params)
        if not _is_text(str(label)):  # a "\ud800" in YAML, or a file name that is not UTF-8
            raise InputError(
                f"agent {item!r}: its label {str(label)!r} holds a lone surrogate, which is not a character and "
                "cannot be written to results.csv (UTF-8); give it a 'label' of text"
            )
        formula = formula_start(str(label))
        if formula is not None:  # results.csv holds labels as they are: refused, never quoted
            raise InputError(
                f"agent {item!r}: its label {str(label)!r} starts with {formula}; expected {FORMULA_RULE} "
                "(results.csv would run it when opened in a spreadsheet): give it another 'label'"
            )
        # A model plays the track it was trained on only, and another program the one it declares
        # (its ``track``): the track of each is its process's word, not the registry's.
        own_track = entry.kind in MODEL_KINDS or entry.kind in EXTERNAL_KINDS
        specs.append(PolicySpec(str(label), factory, track or "unprivileged", only_own_track=own_track))
    labels = [spec.label for spec in specs]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise InputError(f"agents {repeated} appear twice; give one of them a 'label' in the config")
    if isolate:
        from dataclasses import replace

        from ..evaluation.grid import isolated_info
        from ..evaluation.isolated.output import line_prefix
        from ..evaluation.referee import PolicyError

        try:
            infos = isolated_info(specs, limits, sandbox)
        except PolicyError as error:
            last = error.message.strip().splitlines()[-1]  # the exception, not the traceback
            last = last.removeprefix(line_prefix(error.policy).decode())  # (the agent is named here)
            raise InputError(f"agent {error.policy!r}: {one_line(last)}") from None
        specs = [replace(spec, track=info["track"], trained_limits=info["limits"])
                 for spec, info in zip(specs, infos, strict=True)]
    return specs


def refuse_pickled_models(names: Sequence[Any], where: str) -> None:
    """Refuse, before any is loaded, an agent whose model is read from a pickle (an SB3 zip, an
    RLlib checkpoint), whose loading runs the code it holds: ``--data-only-models``."""
    from agents.base import PICKLED_KINDS  # the CLI joins the packages
    from agents.registry import agent_entry

    for item in names:
        name, _, params = agent_item(item)
        try:
            kind = agent_entry(name).kind
        except KeyError:
            continue  # policy_specs names it, with the closest name
        if kind in PICKLED_KINDS:
            path = params.get("path", "PATH")
            raise InputError(
                f"{where}: agent {item!r} is a model read from a pickle ({kind}:), whose loading runs the code it "
                f"holds; export it to the data-only format (wpb export {kind} {path} --out DIR) and give policy:DIR"
            )


def refuse_out_inside_models(names: Sequence[Any], out: Path) -> None:
    """Refuse, before any work, a run folder inside the folder an agent reads its model from (an
    exported policy, an RLlib checkpoint): the run's files would change what the agent reads, and
    the run would be refused at its end as one whose model changed while it ran."""
    where = os.path.realpath(out)
    for item in names:
        _, _, params = agent_item(item)
        path = params.get("path")
        if not isinstance(path, (str, os.PathLike)) or not os.path.isdir(path):
            continue
        folder = os.path.realpath(path)
        if where == folder or where.startswith(folder.rstrip("/") + "/"):
            raise InputError(
                f"--out {out}: lies inside {path}, the folder agent {item!r} reads its model from: the run's files "
                "would change the model it reads; give an --out outside it"
            )


def _is_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _agent_names() -> list[str]:
    from agents.registry import list_agents

    return [name for entry in list_agents() for name in (entry.name, *entry.aliases)]


def _ref_name(ref: Any) -> str:
    return f"{name_part(ref.mode)}__T{ref.steps}__{ref.index}"  # the regime comes from the data


def _cmd_eval(config: Settings) -> int:
    external = external_agents(config["agents"])
    if external and not config["isolate"]:
        runs = "runs another program" if len(external) == 1 else "run other programs"
        print(f"note: {', '.join(external)} {runs}: every agent of this run is evaluated isolated (--isolate), "
              "each in a sandboxed process of its own", file=sys.stderr)
        config = config.with_value("isolate", True, f"--agents {external[0]} (another program runs isolated)")
    try:
        return _run_eval(config)
    finally:
        gc.unfreeze()  # see the freeze below: main() may be called from a longer-lived process


def _run_eval(config: Settings) -> int:
    from tqdm import tqdm

    from ..evaluation.grid import ROW_COLUMNS, given_refs, row_key, run_grid, skipped
    from ..evaluation.ray_backend import RayBackendError
    from ..evaluation.referee import PolicyError
    from ..evaluation.reports.report import run_metadata
    from ..evaluation.reports.run_writer import RunWriter
    from ..scoring.queries import has_queries
    from ..evaluation.run_folder import (
        check_no_earlier_run,
        checkpoint_differences,
        checkpoint_folder,
        claim,
        discard,
        episodes_digest,
        other_checkpoints,
        publish,
        read_checkpoints,
        staging_folder,
        write_checkpoint_settings,
    )

    # Everything is checked before --out is touched: a typo never costs an earlier run.
    out = Path(config.out)
    check_folder_path(out)
    check_no_earlier_run(out, config.force)
    limits = run_limits(config)
    beside_budget = store_limits(config)  # kind budgets or write time
    # Read before any agent's process starts; from then on it lives in this process's memory only.
    seed_of_file = _seed_of_file(config)
    if config["backend"] == "ray" and config["isolate"]:
        raise InputError(f"{config.origin_of('isolate')}: isolated evaluation runs with --backend processes, not ray")
    if config["address"] is not None and config["backend"] != "ray":
        raise InputError(f"{config.origin_of('address')}: names a Ray cluster; it needs --backend ray")
    if config["address"] is not None and config.origin_of("jobs") != "default":  # the cluster's CPUs run the tasks
        raise InputError(
            f"{config.origin_of('jobs')}: sets the worker processes, or the CPUs of a local Ray; with "
            f"{config.origin_of('address')} the tasks run on the cluster's CPUs: leave --jobs out"
        )
    if config["backend"] == "ray" and importlib.util.find_spec("ray") is None:
        raise InputError("--backend ray needs Ray: pip install 'writepolicybench-gym[scale]'")
    if config["data_only_models"]:
        refuse_pickled_models(config["agents"], config.origin_of("data_only_models"))
        _refuse_public_seed(config)
    refuse_out_inside_models(config["agents"], out)
    sandbox = _sandbox(config, out) if config["isolate"] else None
    policies = policy_specs(config["agents"], config["isolate"], limits, sandbox)
    _refuse_misplaced_models(config, policies)
    recorded = recorded_settings(config)
    # The checkpoint key covers the models the agents read too: a model replaced between an
    # interrupt and --resume never mixes its rows with the old one's.
    models = agent_files(config["agents"])
    if models:
        recorded["agent_files"] = models
    if config["episodes"] is not None:
        generated_only = [name for name in GENERATED_ONLY if config.origin_of(name) != "default"]
        if generated_only:
            given = ", ".join(config.origin_of(name) for name in generated_only)
            raise InputError(f"{given}: apply to generated episodes, not to the episodes read from files")
        placed = read_placed_episode_source(config["episodes"])
        episodes = [episode for _, episode in placed]
        if beside_budget.compression is not None:
            queried = next((place for place, episode in placed if has_queries(episode)), None)
            if queried is not None:
                raise InputError(f"{config.origin_of('compression')}: {queried} is an episode with queries, and "
                                 "the query tier has no bound with compressed writes")
        try:
            refs = given_refs(episodes, str(config["episodes"]), [place for place, _ in placed])
        except ValueError as error:
            raise InputError(str(error)) from None
        # The checkpoint key (the config hash) covers what the episodes hold, not only where they
        # are: an edited file never mixes its new rows with checkpointed old ones.
        recorded["episodes_sha256"] = episodes_digest(episodes)
    else:
        # Generated episodes are the package's: a run resumed under another version must not mix them.
        recorded["generated_by"] = f"wpb_gym {__version__}"
        refs = _generated_refs(config, _generation_seed(config, recorded, out, seed_of_file))
    notes = skipped(policies, config["tracks"])
    if not any(spec.runs_on(track) for spec in policies for track in config["tracks"]):
        raise InputError(f"{config.origin_of('tracks')}: no agent plays {', '.join(config['tracks'])} ("
                         + "; ".join(notes) + "): an agent plays the track it declares, and an unprivileged one "
                         "the privileged track too")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)

    def progress(results, total):
        return tqdm(results, total=total, desc="episodes", unit="ep", file=sys.stderr, disable=config.quiet)

    run = run_metadata(recorded, notes, __version__)
    run["isolation"] = isolation_level(config["isolate"], sandbox)  # what the agents could reach
    run["data_only_models"] = bool(config["data_only_models"])  # whether a model file could run code here
    partial = checkpoint_folder(out, run["config_hash"])
    names = {_ref_name(ref) for ref in refs}
    done: dict[str, list[dict[str, Any]]] = {}
    # One run at a time writes --out: from before its checkpoints are touched until it is published.
    with claim(out):
        check_no_earlier_run(out, config.force)  # again: another run may have published meanwhile
        if config.resume and partial.is_dir():
            done = {k: v for k, v in read_checkpoints(partial, ROW_COLUMNS).items() if k in names}
            print(f"resuming: {len(done)} of {len(refs)} episodes already done", file=sys.stderr)
        elif config.resume:
            others = other_checkpoints(out, run["config_hash"])
            why = ""
            if others:
                found = ", ".join(p.name for p in others)
                differences = dict.fromkeys(checkpoint_differences(other, recorded) for other in others)
                why = f": its checkpoints ({found}) are of {'; or '.join(differences)}"
            print(
                f"note: nothing to resume in {out} for these settings and episodes{why}; starting afresh",
                file=sys.stderr,
            )
        elif partial.is_dir():
            shutil.rmtree(partial)
        todo = [ref for ref in refs if _ref_name(ref) not in done]
        by_name = {_ref_name(ref): ref for ref in refs}
        # The report of each regime and length is prepared in a second process as its episodes end.
        with RunWriter((ref.mode, ref.steps) for ref in refs) as writer:
            for name, chunk in done.items():
                writer.add((by_name[name].mode, by_name[name].steps), chunk)

            checkpointed: list[Any] = []

            def checkpoint(ref, chunk):
                if not checkpointed:  # with the first episode: what the checkpoints' key covers
                    write_checkpoint_settings(partial, recorded)
                    checkpointed.append(ref)
                write_atomic(partial / f"{_ref_name(ref)}.json", json.dumps(chunk))
                writer.add((ref.mode, ref.steps), chunk)

            # What exists before the grid lives until the command ends: frozen, the cyclic garbage
            # collector stops scanning it during the grid (about 10% of the grid's time on the paper
            # grid). Unfrozen when the command ends, so nothing stays out of the collector's reach.
            gc.freeze()
            try:
                rows = run_grid(
                    todo,
                    policies,
                    config["budgets"],
                    config["tracks"],
                    jobs=config["jobs"],
                    progress=progress,
                    on_episode_done=checkpoint,
                    isolate=config["isolate"],
                    limits=limits,
                    backend=config["backend"],
                    address=config["address"],
                    sandbox=sandbox,
                    store_limits=beside_budget,
                )
            except PolicyError as error:  # an agent failed: the checkpoints stay for --resume
                print(f"wpb eval: {error}", file=sys.stderr)
                return 1
            except RayBackendError as error:  # e.g. no cluster at --address; checkpoints stay for --resume
                where = f"--address {config['address']}" if config["address"] else "--backend ray"
                raise InputError(f"{where}: the grid failed on Ray: {error}") from None
            # Each episode built its agents afresh, reading their models then: a model replaced
            # during the grid gave some rows of one model and some of another.
            _check_models_unchanged(config["agents"], models, partial)
            stopped = [row for row in rows if row.get("error")]
            if stopped:
                agents = sorted({row["policy"] for row in stopped})
                print(
                    f"warning: {len(stopped)} runs of {', '.join(agents)} were stopped by a limit or diverged; "
                    "see the 'error' column of results.csv and leaderboard.md",
                    file=sys.stderr,
                )
            if done:
                rows = sorted(rows + [row for chunk in done.values() for row in chunk], key=row_key)
            # The new run is written beside the old one and replaces it only once complete.
            staging = staging_folder(out)
            try:
                pictures = writer.write(staging, rows, run)
                publish(staging, out)
            finally:
                discard(staging)
        shutil.rmtree(partial, ignore_errors=True)
    print(f"{len(rows)} rows over {len(refs)} episodes -> {out}/ (results.csv, leaderboard.md, {len(pictures)} plots)")
    return 0


def agent_files(names: Sequence[Any]) -> dict[str, dict[str, str]]:
    """The content of the files each agent reads, by label, then path: ``run_folder.input_digest``
    of its ``path`` (a learner's state, a trained model file or checkpoint folder) and, for a
    trained model, of the env arguments saved beside it (``<model>.env.json``)."""
    from agents.base import EXTERNAL_KINDS, MODEL_KINDS  # the CLI joins the packages
    from agents.model_agent import model_files
    from agents.registry import agent_entry

    from ..evaluation.isolated.sandbox import files_shown_with

    from ..evaluation.run_folder import input_digest

    found = {}
    for item in names:
        name, label, params = agent_item(item)
        path = params.get("path")
        if not isinstance(path, (str, os.PathLike)):
            continue
        entry = agent_entry(name)
        if entry.kind in MODEL_KINDS:
            files = model_files(path)
        elif entry.kind in EXTERNAL_KINDS:  # what its sandbox shows it: the program and its stem's files
            files = files_shown_with(path) if Path(path).exists() else [Path(path)]
        else:
            files = [Path(path)]
        # Files and folders only: a named pipe or a device (a link to /dev/zero) is never done being read.
        digests = {str(file): input_digest(file) for file in files if file.is_file() or file.is_dir()}
        if digests:
            found[label or default_label(entry.name, params)] = digests
    return found


def _check_models_unchanged(names: Sequence[Any], before: dict[str, dict[str, str]], partial: Path) -> None:
    """Refuse the grid's rows if a file an agent reads changed while it ran: they would mix two
    models. Its checkpoints are removed (they may mix them too); the earlier run stays."""
    now = agent_files(names)
    for label, files in before.items():
        changed = [path for path, digest in files.items() if now.get(label, {}).get(path) != digest]
        if changed:
            shutil.rmtree(partial, ignore_errors=True)
            raise InputError(
                f"agent {label!r}: {', '.join(changed)} changed while the run ran: its rows would mix two models; "
                "nothing was written: run again once the model stays put"
            )


def _refuse_public_seed(config: Settings) -> None:
    """A leaderboard run (``--data-only-models``) on generated episodes of a seed anyone can know:
    refused when the seed is the default (0, every run's), noted when it was chosen. Whoever
    knows the seed generates the episodes and their labels, and can train on them."""
    if config["episodes"] is not None or config["seed_file"] is not None or config["seed"] == DRAW:
        return
    where = config.origin_of("data_only_models")
    if config.origin_of("seed") == "default":
        raise InputError(
            f"{where}: a leaderboard run needs episodes its submitters cannot know, and the default seed "
            f"({config['seed']}) is public (anyone can generate its episodes and their labels): give --seed-file PATH, "
            f"--seed {DRAW} or --episodes PATH (or an explicit --seed N to run on a public seed anyway)"
        )
    print(
        f"note: the seed of {config.origin_of('seed')} ({config['seed']}) is public: anyone who knows it can generate "
        f"the episodes and their labels; a leaderboard run takes --seed-file PATH or --seed {DRAW}",
        file=sys.stderr,
    )


def _seed_of_file(config: Settings) -> int | None:
    """The seed of ``--seed-file``, if given (None otherwise); it and ``--seed`` are one setting."""
    if config["seed_file"] is None:
        return None
    where = config.origin_of("seed_file")
    if config.origin_of("seed") != "default":
        raise InputError(f"{where} and {config.origin_of('seed')}: both give the seed; give one of them")
    if config["episodes"] is not None:
        return None  # refused with the other settings of generated episodes
    return read_seed_file(config["seed_file"], where)


def _generation_seed(config: Settings, recorded: dict[str, Any], out: Path, of_file: int | None) -> int:
    """The seed of the generated episodes, with what the results record of it set in ``recorded``:
    a seed of ``--seed-file`` as its fingerprint (the file's seed may serve many runs, whose
    results are published), a drawn one as it is (it serves this run alone), with where it
    came from (``seed_from``)."""
    import secrets

    from ..evaluation.run_folder import drawn_seed

    if of_file is not None:
        recorded.update(seed=seed_fingerprint(of_file), seed_from="file")
        return of_file
    if config["seed"] != DRAW:
        return int(config["seed"])
    recorded["seed_from"] = "drawn"
    seed = drawn_seed(out, recorded) if config.resume else None
    if seed is not None:
        print("note: continuing with the seed the interrupted run drew (recorded in its checkpoints)", file=sys.stderr)
    else:
        seed = secrets.randbits(DRAWN_SEED_BITS)
    recorded["seed"] = seed
    return seed


def _sandbox(config: Settings, out: Path) -> Any:
    """The agents' sandbox of ``wpb eval --isolate``, hiding the run folder and the episode files;
    None (a process each, unsandboxed) only where the platform has none and
    ``--accept-weaker-isolation`` says to go on without."""
    from ..evaluation.isolated.sandbox import plan, problem

    why = problem()
    if why is None:
        hidden = [str(out)] + [str(config[name]) for name in ("episodes", "seed_file") if config[name] is not None]
        walls = sandbox_of(config, tuple(hidden))
        try:
            plan(walls, None)  # what every agent's sandbox shows: --out may not lie inside it
        except ValueError as error:
            raise InputError(f"--isolate: {error}") from None
        return walls
    if not config.accept_weaker_isolation:
        raise InputError(
            f"--isolate: cannot sandbox the agents' processes here ({one_line(why)}); "
            "pass --accept-weaker-isolation to run them in a process each, unsandboxed"
        )
    print(f"note: --isolate without a sandbox ({one_line(why)}): each agent runs in a process of its own only",
          file=sys.stderr)
    return None


def _cmd_ablate(settings: Settings) -> int:
    from ..evaluation.grid import run_grid
    from ..evaluation.isolated.sandbox import problem
    from ..evaluation.reports.compare import ablation_markdown
    if settings.out is not None and Path(settings.out).is_dir():
        raise InputError(f"--out {settings.out}: is a folder; expected the markdown file to write")
    if settings.out is not None:
        check_folder_path(Path(settings.out).parent, f"--out {settings.out}: its folder")
    configs = []
    for path in (settings.config_a, settings.config_b):
        config = eval_config_file(path)
        if config["episodes"] is not None:
            raise InputError(f"{path} reads episodes from files; ablations vary the seed of generated ones")
        for name in ("seed", "seed_file"):
            if config.origin_of(name) != "default":
                raise InputError(f"{path}: {name}: an ablation runs seeds 0..--seeds-1 itself; leave '{name}:' out")
        # Both variants are checked before any work.
        _generated_refs(config, 0)
        walls = AUTO  # the sandbox where the platform allows one, with the config's limits
        if config["isolate"] and problem() is None:
            walls = sandbox_of(config)
        if config["data_only_models"]:
            refuse_pickled_models(config["agents"], f"{path}: data_only_models")
        store_limits(config)  # one at a time: refused here, before any work
        policies = policy_specs(config["agents"], config["isolate"], run_limits(config), walls)
        _refuse_misplaced_models(config, policies, str(path))
        configs.append((config, policies, walls))
    runs = []
    for config, policies, walls in configs:
        per_seed = []
        for seed in range(settings.seeds):
            refs = _generated_refs(config, seed)
            jobs = settings.jobs or config["jobs"]
            per_seed.append(
                run_grid(
                    refs, policies, config["budgets"], config["tracks"], jobs=jobs, isolate=config["isolate"],
                    limits=run_limits(config), sandbox=walls, store_limits=store_limits(config),
                )
            )
        runs.append(per_seed)
    try:
        text = ablation_markdown(runs[0], runs[1], Path(settings.config_a).stem, Path(settings.config_b).stem)
    except ValueError as error:  # the variants played different episodes: no paired test means anything
        raise InputError(str(error)) from None
    if settings.out:
        write_atomic(settings.out, text)
    print(text, end="")
    return 0


def add_commands(sub: Any) -> None:
    """Add eval and ablate to the ``wpb`` subcommands ``sub``."""
    ev = sub.add_parser("eval", help="run agents over episodes x budgets x tracks; write results.csv, leaderboard.md")
    EVAL.add_to(ev)
    ev.set_defaults(func=_cmd_eval, prog=ev.prog, settings=EVAL)

    ablate = sub.add_parser("ablate", help="two eval configs over N seeds: mean ± std and paired t-tests")
    ABLATE.add_to(ablate)
    ablate.set_defaults(func=_cmd_ablate, prog=ablate.prog, settings=ABLATE)


def _generated_refs(config, seed: int) -> list:
    """The grid's generated episodes; a length a regime cannot have is an input error naming both."""
    from ..evaluation.grid import generated_refs

    try:
        return generated_refs(config["regimes"], config["lengths"], config["episodes_per_condition"], seed)
    except ValueError as error:
        lengths, regimes = config.origin_of("lengths"), config.origin_of("regimes")
        if lengths == "default":
            lengths = f"--lengths (by default {','.join(map(str, config['lengths']))})"
        if regimes == "default":
            regimes = f"--regimes (by default {','.join(config['regimes'])})"
        raise InputError(f"{lengths} with {regimes}: {error}") from None
