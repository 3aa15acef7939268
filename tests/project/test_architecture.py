"""The package's layers import downwards only: core -> episodes -> scoring -> envs -> evaluation
-> CLI, no modules import each other in a cycle, and only the CLI joins ``wpb_gym`` with
``agents``: ``agents`` and the benchmarks never import the CLI, which uses them. Every import
counts, including those inside functions (a lazy import is still a dependency) and, outside
``wpb_gym``, those of code a script runs from a string (``python -c``); imports under
``if TYPE_CHECKING:`` are annotations only and do not. No module of ``wpb_gym``, ``agents`` or
the benchmarks imports or reads another's private names (``_name``): a name shared is public."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "wpb_gym"
ORDER = ["core", "episodes", "scoring", "envs", "evaluation", "cli"]


def module_name(path: Path) -> str:
    """``wpb_gym.envs.env`` for ``wpb_gym/envs/env.py``; a package is named by its folder (a
    file outside the repository by its own name)."""
    parts = (path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int | None:
    """The layer of a ``wpb_gym`` module, None for the package itself (the public façade)."""
    parts = module.split(".")
    return ORDER.index(parts[1]) if len(parts) > 1 else None


def _nodes(node: ast.AST, in_strings: bool = False):
    """Every node under ``node`` but those of ``if TYPE_CHECKING:`` blocks (annotations only);
    ``in_strings``: also those of the Python code held in string constants."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
            continue
        yield child
        yield from _nodes(child, in_strings)
        if in_strings and isinstance(child, ast.Constant) and isinstance(child.value, str) and "import" in child.value:
            try:
                code = ast.parse(child.value)
            except SyntaxError:  # prose, not code
                continue
            yield from _nodes(code, in_strings)


def imports(path: Path, known: dict[str, Path], in_strings: bool = False) -> tuple[set[str], set[str]]:
    """The ``wpb_gym`` modules and the other top-level packages ``path`` imports at run time,
    anywhere in it (inside functions too; ``in_strings``: in code held in strings as well).
    ``from .pkg import name`` counts as importing the module ``pkg.name`` when that is a
    module, else the package ``pkg``."""
    own = module_name(path)
    package = own if path.stem == "__init__" else own.rpartition(".")[0]
    inside, outside = set(), set()
    for node in _nodes(ast.parse(path.read_text(encoding="utf-8")), in_strings):
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


def cli_imports(path: Path, known: dict[str, Path]) -> list[str]:
    inside, _ = imports(path, known, in_strings=True)
    return sorted(m for m in inside if m == "wpb_gym.cli" or m.startswith("wpb_gym.cli."))


def test_agents_and_benchmarks_never_import_the_cli():
    # The CLI is their user: what both need lives below it (core.setting_values, core.messages,
    # core.settings_files, core.atomic_files). Benchmarks run the CLI as a command.
    known = modules()
    found = [
        f"{path.relative_to(ROOT)} imports {module}"
        for folder in ("agents", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for module in cli_imports(path, known)
    ]
    assert found == []


def test_the_cli_check_sees_imports_in_functions_and_in_code_run_from_strings(tmp_path):
    known = modules()
    script = tmp_path / "script.py"
    script.write_text(
        "def check(value):\n    from wpb_gym.cli.inputs import parse_int\n\n"
        'CODE = """\nfrom wpb_gym import cli\n"""\n'
        'PROSE = "import what you need"\n'
    )
    assert cli_imports(script, known) == ["wpb_gym.cli", "wpb_gym.cli.inputs"]


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


def our_modules() -> dict[str, Path]:
    """Every module of ``wpb_gym`` and ``agents`` by its name, and every benchmark script by its
    file's name (how the scripts import each other)."""
    found = {module_name(p): p for folder in ("wpb_gym", "agents") for p in sorted((ROOT / folder).rglob("*.py"))}
    return found | {p.stem: p for p in sorted((ROOT / "benchmarks").glob("*.py"))}


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reads(path: Path, known: dict[str, Path]) -> set[str]:
    """``module._name`` for each private name of another of ``known`` that ``path`` imports
    (``from module import _name``) or reads (``module._name``), anywhere in it."""
    own = module_name(path) if path.parent.name != "benchmarks" else path.stem
    package = own if path.stem == "__init__" else own.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    bound: dict[str, str] = {}  # a local name -> the module of ours it names
    reads = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                if f"{target}.{alias.name}" in known:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
                if target in known and target != own and private(alias.name):
                    reads.add(f"{target}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in known:
                    bound[alias.asname] = alias.name
                elif alias.name.split(".")[0] in {m.split(".")[0] for m in known}:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.insert(0, value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                module = ".".join([bound[value.id], *chain])
                if module in known and module != own:
                    reads.add(f"{module}.{node.attr}")
    return reads


def private_reads_everywhere() -> set[str]:
    known = our_modules()
    return {
        f"{path.relative_to(ROOT)}: {read}"
        for folder in ("wpb_gym", "agents", "benchmarks")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for read in private_reads(path, known)
    }


def test_no_module_reads_another_modules_private_names():
    assert private_reads_everywhere() == set()


def test_the_private_name_check_sees_imports_and_reads(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import wpb_gym.envs.env as env_module\n"
        "from wpb_gym.evaluation.isolated import isolation\n\n"
        "def run():\n    from wpb_gym.cli.evaluation import _hidden\n"
        "    return isolation._Hidden, env_module._private, env_module.__name__, run._cache\n"
    )
    assert private_reads(script, our_modules()) == {
        "wpb_gym.cli.evaluation._hidden",
        "wpb_gym.evaluation.isolated.isolation._Hidden",
        "wpb_gym.envs.env._private",
    }


def test_files_are_written_atomically_in_one_place():
    """One atomic writer (``core.atomic_files``): a second copy drifts from it (the file mode,
    the clean-up on failure)."""
    writers = sorted(
        str(path.relative_to(ROOT))
        for folder in ("wpb_gym", "agents")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Attribute, ast.Name)) and getattr(node, "attr", getattr(node, "id", "")) == "mkstemp"
    )
    assert writers == ["wpb_gym/core/atomic_files.py"]


# Attributes other objects reach through a public property instead: the vector env's ``core``
# and ``single_envs``, the env's ``store`` and ``observation_encoder``, the reward function's
# started labels (``critical``, ``utilities``, ``costs``, ``oracle_prefix``). Read as ``obj._name`` they bypass what the
# property documents (a store read before any reset, or not read back from the compiled core).
GUARDED_ATTRIBUTES = ("_core", "_envs", "_store", "_encoder", "_critical", "_utilities", "_costs", "_oracle_prefix")
# An attacker of the evaluation reaches for the store behind a view on purpose: the tests check
# that it gains nothing.
GUARDED_READS_ON_PURPOSE = {"tests/evaluation/adversaries.py: store._store"}


def guarded_reads(path: Path) -> set[str]:
    """``obj._name`` for a guarded ``_name`` in ``path``, for any ``obj`` but ``self``."""
    return {
        f"{ast.unparse(node.value)}.{node.attr}"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and node.attr in GUARDED_ATTRIBUTES
        and not (isinstance(node.value, ast.Name) and node.value.id == "self")
    }


def test_the_guarded_attributes_are_read_through_their_properties():
    found = {
        f"{path.relative_to(ROOT)}: {read}"
        for folder in ("wpb_gym", "agents", "benchmarks", "tests")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for read in guarded_reads(path)
    }
    assert found - GUARDED_READS_ON_PURPOSE == set()


def test_the_guarded_attribute_check_sees_reads_of_any_object(tmp_path):
    script = tmp_path / "script.py"
    script.write_text("def f(vector, env, self):\n    return vector._core, env.unwrapped._store, self._envs\n")
    assert guarded_reads(script) == {"vector._core", "env.unwrapped._store"}
