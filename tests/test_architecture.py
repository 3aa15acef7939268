"""The benchmark core and the environment never import ``agents``; only the CLI joins them."""

import ast
import subprocess
import sys
from pathlib import Path

import wpb_gym

PACKAGE = Path(wpb_gym.__file__).parent
JOINING_MODULES = {"cli.py"}


def imported_modules(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module


def test_no_core_module_imports_agents():
    offenders = [
        f"{path.relative_to(PACKAGE)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name not in JOINING_MODULES
        for name in imported_modules(path)
        if name == "agents" or name.startswith("agents.")
    ]
    assert offenders == []


def test_importing_the_package_loads_no_agents_and_no_torch():
    code = "import sys, wpb_gym; print(sorted(m for m in sys.modules if m.split('.')[0] in ('agents', 'torch')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_public_api_has_the_spec_names():
    for name in (
        "Step",
        "Episode",
        "MemoryItem",
        "MemoryAction",
        "ByteBudget",
        "ByteMemoryStore",
        "estimate_bytes",
        "load_jsonl",
        "write_jsonl",
    ):
        assert hasattr(wpb_gym, name), name
    assert set(wpb_gym.__all__) <= set(dir(wpb_gym))
