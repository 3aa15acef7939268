"""The package's layers import downwards only: core -> episodes -> scoring -> envs -> evaluation
-> CLI, no modules import each other in a cycle, and only the CLI joins ``wpb_gym`` with
``agents``. Every import counts, including those inside functions (a lazy import is still a
dependency); imports under ``if TYPE_CHECKING:`` are annotations only and do not."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "wpb_gym"
ORDER = ["core", "episodes", "scoring", "envs", "evaluation", "cli"]


def module_name(path: Path) -> str:
    """``wpb_gym.envs.env`` for ``wpb_gym/envs/env.py``; a package is named by its folder."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int | None:
    """The layer of a ``wpb_gym`` module, None for the package itself (the public façade)."""
    parts = module.split(".")
    return ORDER.index(parts[1]) if len(parts) > 1 else None


def _nodes(node: ast.AST):
    """Every node under ``node`` but those of ``if TYPE_CHECKING:`` blocks (annotations only)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        yield child
        yield from _nodes(child)


def imports(path: Path, known: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The ``wpb_gym`` modules and the other top-level packages ``path`` imports at run time,
    anywhere in it (inside functions too). ``from .pkg import name`` counts as importing the
    module ``pkg.name`` when that is a module, else the package ``pkg``."""
    own = module_name(path)
    package = own if path.stem == "__init__" else own.rpartition(".")[0]
    inside, outside = set(), set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "wpb_gym":
                outside.add(target.split(".")[0])
                continue
            for alias in node.names:
                inside.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                (inside.add(alias.name) if top == "wpb_gym" else outside.add(top))
    return inside, outside


def test_every_module_lives_in_a_layer():
    flat = [m for m in modules() if m != "wpb_gym" and layer(m) is None]
    assert flat == []
    assert {m.split(".")[1] for m in modules() if m != "wpb_gym"} == set(ORDER)


def test_layers_import_downwards_only():
    known = modules()
    upward = []
    for module, path in known.items():
        if module == "wpb_gym":
            continue
        inside, _ = imports(path, known)
        upward += [f"{module} imports {m}" for m in inside if m != "wpb_gym" and layer(m) > layer(module)]
        upward += [f"{module} imports the façade" for m in inside if m == "wpb_gym"]
    assert upward == []


def test_only_the_cli_imports_agents():
    known = modules()
    joining = sorted(m for m, p in known.items() if "agents" in imports(p, known)[1])
    assert joining and all(m.startswith("wpb_gym.cli.") for m in joining)


def test_the_import_scanner_resolves_relative_imports():
    known = modules()
    inside, outside = imports(PACKAGE / "envs" / "env.py", known)
    assert "wpb_gym.core.store" in inside and "gymnasium" in outside


def test_no_import_cycles():
    known = modules()
    graph = {m: {d for d in imports(p, known)[0] if d in known} for m, p in known.items() if m != "wpb_gym"}
    # Depth-first search for a back edge: a module reached again while its own imports are open.
    state: dict[str, str] = {}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for dependency in sorted(graph.get(module, ())):
            if state.get(dependency) == "open":
                cycles.append(trail[trail.index(dependency) :] + [dependency])
            elif dependency not in state:
                visit(dependency, [*trail, dependency])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []
