"""The types of ``wpb``'s flags: each parses one option's text or raises argparse's error, naming
what was expected."""

from __future__ import annotations

import argparse
import json
from typing import Any, Sequence

from ..core.tracks import TRACKS
from ..episodes.generators.paper import REGIMES, GeneratorConfig
from .inputs import (
    MAX_LENGTH,
    flag_type,
    parse_budgets,
    parse_ints,
    parse_names,
    parse_path,
    parse_seconds,
)

regimes = flag_type(parse_names, REGIMES)


seconds = flag_type(parse_seconds)


positive_ints = flag_type(parse_ints, 1, MAX_LENGTH)


names = flag_type(parse_names)


tracks = flag_type(parse_names, TRACKS)


budgets = flag_type(parse_budgets)


path = flag_type(parse_path)


def int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def generator_override(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    known = GeneratorConfig.__dataclass_fields__
    if key not in known or key in ("regime", "length"):
        options = ", ".join(k for k in known if k not in ("regime", "length"))
        raise argparse.ArgumentTypeError(f"unknown generator option {key!r}; options: {options}")
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key, value


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[str(h) for h in header]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
