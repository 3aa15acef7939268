"""Reading a YAML file of settings (eval and training configs) with errors that name the file."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from .inputs import did_you_mean


def read_settings(path: str | Path, known: Iterable[str]) -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (empty file: {}), refusing keys not in ``known``.

    Raises FileNotFoundError or ValueError naming the file.
    """
    path = Path(path)
    try:
        loaded = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a folder; expected a YAML file") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}); expected a YAML file") from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{where}: not valid YAML: {problem}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{path} must hold a mapping of settings (key: value lines), got a {type(loaded).__name__}")
    if any(not isinstance(key, str) for key in loaded):
        raise ValueError(f"{path}: setting names must be text, got {sorted(map(repr, loaded))}")
    known = set(known)
    unknown = sorted(set(loaded) - known)
    if unknown:
        hints = "".join(did_you_mean(name, known) for name in unknown)
        raise ValueError(f"{path}: unknown setting(s) {unknown}{hints}; known: {sorted(known)}")
    return loaded
