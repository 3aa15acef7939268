"""The package's layers import downwards only: core -> episodes -> scoring -> envs -> evaluation
-> CLI, and only the CLI joins ``wpb_gym`` with ``agents``. Every import counts, including those
inside functions (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "wpb_gym"

LAYERS = {
    "core": "types accounting budget store tracks policy readonly checks version strict_json file_names",
    "episodes": "generator contract_generator utility_scale sources jsonl frozen change_events openapi_spec "
    "openapi_changes openapi_ingest real_episodes",
    "scoring": "metrics oracle",
    "envs": "env stream_table rewards render registration",
    "evaluation": "runner referee wire isolation policy_process child_processes grid report plots compare "
    "seed_stats run_folder decidability",
    "cli": "cli cli_inputs settings eval_settings",
}
ORDER = list(LAYERS)
LAYER = {module: ORDER.index(name) for name, modules in LAYERS.items() for module in modules.split()}


def imports(path: Path) -> tuple[set[str], set[str]]:
    """The package modules and the top-level packages ``path`` imports, anywhere in it."""
    inside, outside = set(), set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            inside.update([node.module.split(".")[0]] if node.module else [a.name for a in node.names])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            outside.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            outside.update(alias.name.split(".")[0] for alias in node.names)
    return inside, outside


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def test_every_module_has_a_layer():
    assert {p.stem for p in modules()} == set(LAYER)


def test_layers_import_downwards_only():
    upward = []
    for path in modules():
        inside, _ = imports(path)
        upward += [f"{path.stem} ({ORDER[LAYER[path.stem]]}) imports {m} ({ORDER[LAYER[m]]})"
                   for m in inside if m in LAYER and LAYER[m] > LAYER[path.stem]]
    assert upward == []


def test_only_the_cli_imports_agents():
    assert [p.stem for p in modules() if "agents" in imports(p)[1]] == ["cli"]
