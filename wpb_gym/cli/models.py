"""``wpb export sb3`` and ``wpb export rllib``: a trained model to the data-only policy format.

An SB3 zip and an RLlib checkpoint are pickles, which run code when they are loaded; an
exported policy (``agents.exported``) is JSON and safetensors, which ``wpb eval --agents
policy:DIR`` loads without running anything of it. Exporting loads the model, so it is for
models one trusts (one's own, before submitting them); ``wpb eval --data-only-models`` then
refuses every model given as a pickle.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from ..core.checks import InputError
from ..core.messages import one_line
from ..core.setting_values import parse_choice, parse_int, parse_path, parse_text
from ..evaluation.run_folder import check_folder_path
from .inputs import check_env_kwargs, parse_env_kwarg
from .settings import CommandSettings, Setting, Settings, switch

SB3_ALGOS = ("auto", "MaskablePPO", "PPO", "A2C", "DQN", "RecurrentPPO")
# Env arguments the evaluator decides; a model's own are those that shape its observation.
_RESERVED = {"episodes": "the evaluator's to choose", "episode_seed": "the evaluator's to choose"}


def _cmd_export_sb3(settings: Settings) -> int:
    return _export("sb3", settings)


def _cmd_export_rllib(settings: Settings) -> int:
    return _export("rllib", settings)


def _export(library: str, settings: Settings) -> int:
    from agents.exported.export import ExportError, export_rllib, export_sb3  # the CLI joins the packages
    from agents.exported.folder import PolicyFileError

    source = Path(settings.model if library == "sb3" else settings.checkpoint)
    out = Path(settings.out)
    check_folder_path(out.parent if not out.exists() else out)
    env_kwargs = None
    if settings.env_kwargs:
        env_kwargs = check_env_kwargs(dict(settings.env_kwargs), "--env-kwargs", _RESERVED)
    common = {"env_kwargs": env_kwargs, "force": settings.force, "samples": settings.samples,
              "episodes": settings.episodes}
    try:
        if library == "sb3":
            done = export_sb3(source, out, algo=settings.algo, **common)
        else:
            done = export_rllib(source, out, module_id=settings.module_id, **common)
    except (PolicyFileError, ExportError) as error:
        raise InputError(str(error)) from None
    except (FileNotFoundError, ValueError, TypeError, ImportError) as error:  # the model could not be loaded
        message = one_line(str(error))
        raise InputError(message if str(source) in message else f"{source}: {message}") from None
    checked = f"{done.samples:,} sampled observations and {done.episodes} played episodes ({done.actions:,} actions)"
    print(f"exported the {done.algorithm} policy of {source} -> {out}/ (policy.json, weights.safetensors); "
          f"it decides as the model does on {checked}")
    return 0


def _settings(library: str, source: Setting, extra: tuple[Setting, ...]) -> CommandSettings:
    return CommandSettings(
        f"wpb export {library}",
        (
            source,
            Setting("out", parse_path, "the policy folder to write (policy.json, weights.safetensors)", required=True),
            *extra,
            Setting(
                "env_kwargs",
                parse_env_kwarg,
                "the env arguments the model observes with (slots, track, observation_mode...), where the model "
                "does not say them (default: " + ("MODEL.env.json" if library == "sb3" else "the checkpoint's") + ")",
                many=True,
                pairs=True,
                metavar="KEY=VALUE",
            ),
            Setting("samples", partial(parse_int, minimum=0),
                    "sampled observations on which the export must decide as the model does", default=1000),
            Setting("episodes", partial(parse_int, minimum=0),
                    "generated episodes on which the export must act as the model does", default=3),
            switch("force", "replace an exported policy already in --out"),
        ),
        config=False,
    )


EXPORT_SB3 = _settings(
    "sb3",
    Setting("model", parse_path, "the SB3 model file (.zip); loading it runs the code it holds: export only models "
            "you trust", positional=True, required=True),
    (Setting("algo", partial(parse_choice, choices=SB3_ALGOS), "the model's class (auto: as sb3:PATH finds it)",
             default="auto"),),
)
EXPORT_RLLIB = _settings(
    "rllib",
    Setting("checkpoint", parse_path, "the RLlib checkpoint folder; loading it runs the code it holds: export only "
            "checkpoints you trust", positional=True, required=True),
    (Setting("module_id", parse_text, "the policy's module in the checkpoint", default="default_policy"),),
)


def add_commands(sub: Any) -> None:
    """Add export to the ``wpb`` subcommands ``sub``."""
    export = sub.add_parser("export", help="a trained model to the data-only policy format (policy:DIR)")
    export_sub = export.add_subparsers(dest="library", required=True)
    for library, table, command, what in (("sb3", EXPORT_SB3, _cmd_export_sb3, "an SB3 model file"),
                                          ("rllib", EXPORT_RLLIB, _cmd_export_rllib, "an RLlib checkpoint of masked PPO")):
        parser = export_sub.add_parser(
            library,
            help=f"export {what} to JSON and safetensors, checked to decide as the model does",
            description=f"Export {what} to a folder of policy.json and weights.safetensors that wpb eval --agents "
            "policy:DIR loads without running code from it. The model itself is loaded (unpickled) to export it.",
        )
        table.add_to(parser)
        parser.set_defaults(func=command, prog=parser.prog, settings=table)
