"""Reading a YAML file of settings (eval and training configs) with errors that name the file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def read_settings(path: str | Path, known: Iterable[str]) -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (empty file: {}), refusing keys not in ``known``.

    Raises FileNotFoundError or ValueError naming the file.
    """
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"config file {path} does not exist") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not valid YAML: {error}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} must hold a mapping of settings")
    known = set(known)
    unknown = sorted(set(loaded) - known)
    if unknown:
        raise ValueError(f"{path}: unknown setting(s) {unknown}; known: {sorted(known)}")
    return loaded
