"""Settings files: YAML read strictly into a mapping of known settings.

``ConfigLoader`` is YAML's safe loader made strict (a key given twice, a value its tag does
not fit and a float too small to tell from 0 are refused), for config files and for the
values of ``KEY=VALUE`` flags alike; ``read_settings`` reads a file of settings with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from .messages import did_you_mean
from .setting_values import underflows

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable


class ConfigLoader(yaml.SafeLoader):
    """The YAML of config files and of ``KEY=VALUE`` flags: YAML's safe loader, refusing a key
    given twice in one mapping (YAML keeps the last), a value its tag does not fit and a float
    too small to tell from 0."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"{key!r} is given twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except yaml.YAMLError:
            raise
        except (ValueError, KeyError, IndexError, TypeError, OverflowError):  # a tag its value does not fit
            tag = node.tag.rsplit(":", 1)[-1]
            value = node.value if isinstance(node, yaml.ScalarNode) else "this value"
            raise yaml.constructor.ConstructorError(
                None, None, f"{value!r} is not a valid {tag}", node.start_mark
            ) from None

    def construct_underflow_checked_float(self, node: yaml.ScalarNode) -> float:
        # A setting of 0 can mean "off" (a time limit): a number written too small for a float is refused.
        value = self.construct_yaml_float(node)
        if value == 0 and underflows(node.value.replace("_", "")):
            raise yaml.constructor.ConstructorError(
                None, None, f"{node.value} is too small to tell from 0", node.start_mark
            )
        return value


ConfigLoader.add_constructor("tag:yaml.org,2002:float", ConfigLoader.construct_underflow_checked_float)


def read_settings(path: str | os.PathLike[str] | Traversable, known: Iterable[str]) -> dict[str, Any]:
    """The mapping in the YAML file ``path`` (empty file: {}), refusing keys not in ``known``.
    ``path`` may be a package's resource (``importlib.resources.files``).

    Raises FileNotFoundError or ValueError naming the file.
    """
    path = Path(path) if isinstance(path, (str, os.PathLike)) else path
    try:
        loaded = yaml.load(path.read_bytes().decode("utf-8"), Loader=ConfigLoader)  # noqa: S506 - a SafeLoader
    except FileNotFoundError:
        raise FileNotFoundError(f"config file {path} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"config file {path} is a folder; expected a YAML file") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start}); expected a YAML file") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply; expected a mapping of settings") from None
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
