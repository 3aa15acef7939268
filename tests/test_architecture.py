"""The package's layers import downwards only: core -> episodes -> scoring -> envs -> evaluation
-> CLI, no modules import each other in a cycle, and only the CLI joins ``wpb_gym`` with
``agents``. Every import counts, including those inside functions (a lazy import is still a
dependency)."""

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
    "evaluation": "playing runner referee wire isolation policy_process child_processes grid report plots compare "
    "seed_stats run_folder decidability",
    "cli": "cli cli_inputs settings eval_settings",
}
ORDER = list(LAYERS)
LAYER = {module: ORDER.index(name) for name, modules in LAYERS.items() for module in modules.split()}


def _nodes(node: ast.AST):
    """Every node under ``node`` but those of ``if TYPE_CHECKING:`` blocks (annotations only)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        yield child
        yield from _nodes(child)


def imports(path: Path) -> tuple[set[str], set[str]]:
    """The package modules and the top-level packages ``path`` imports at run time, anywhere in
    it (inside functions too)."""
    inside, outside = set(), set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8"))):
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


def test_no_import_cycles():
    graph = {path.stem: {m for m in imports(path)[0] if m in LAYER} for path in modules()}
    # Depth-first search for a back edge: a module reached again while its own imports are open.
    state: dict[str, str] = {}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for dependency in sorted(graph[module]):
            if state.get(dependency) == "open":
                cycles.append(trail[trail.index(dependency) :] + [dependency])
            elif dependency not in state:
                visit(dependency, [*trail, dependency])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []
