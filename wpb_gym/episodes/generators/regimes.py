"""Every generated regime by name: the paper's and the contract regimes (``paper``,
``contracts``) and the query tier (``queries``). ``make_config`` and ``generate_episode`` take
any of them; a regime's configuration is a ``GeneratorConfig`` or a ``QueryTierConfig``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Union

from ...core.types import Episode
from . import paper, queries
from .paper import GeneratorConfig
from .queries import QUERY_REGIMES, QueryTierConfig

RegimeConfig = Union[GeneratorConfig, QueryTierConfig]
ALL_REGIMES: tuple[str, ...] = (*paper.REGIMES, *QUERY_REGIMES)


def make_config(regime: str = "default", **overrides: Any) -> RegimeConfig:
    """The named regime's configuration with ``overrides`` applied (fields of its config class)."""
    if regime in QUERY_REGIMES:
        return queries.query_config(regime, **overrides)
    if regime not in paper.REGIMES:
        raise ValueError(f"unknown regime {regime!r}; known regimes: {sorted(ALL_REGIMES)}")
    return paper.make_config(regime, **overrides)


def config_options(regime: str) -> tuple[str, ...]:
    """The options ``make_config(regime, ...)`` takes besides the regime and the length."""
    fields = QueryTierConfig.__dataclass_fields__ if regime in QUERY_REGIMES else GeneratorConfig.__dataclass_fields__
    return tuple(name for name in fields if name not in ("regime", "length"))


def generate_episode(config: RegimeConfig, seed: int, index: int = 0, **compiled: Any) -> Episode:
    """Episode ``index`` of the set ``(config, seed)``, whichever regime ``config`` is of
    (``compiled``: see ``paper.generate_episode``)."""
    if isinstance(config, QueryTierConfig):
        return queries.generate_query_episode(config, seed, index)
    return paper.generate_episode(config, seed, index, **compiled)


def generate_episodes(config: RegimeConfig, seed: int, n: int, start: int = 0) -> Iterator[Episode]:
    """Episodes ``start .. start+n-1`` of the set ``(config, seed)``, lazily."""
    for index in range(start, start + n):
        yield generate_episode(config, seed, index)
