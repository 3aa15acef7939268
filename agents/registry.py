"""One registry of agents: names (and the spec's aliases) to classes and their parameters.

``make_agent("last_kb")`` or ``make_agent("RecencyBias")`` builds an agent;
``make_agent("random", p=0.2)`` overrides a parameter; ``list_agents()`` lists every entry
with its track, kind and description (``wpb agents`` prints it).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from .base import MODEL_KINDS, Agent

# Modules whose Agent subclasses (those defining ``name``) are registered, in listing order.
AGENT_MODULES = (
    "agents.scripted.baselines",
    "agents.scripted.oracles",
    "agents.scripted.heuristics",
    "agents.scripted.keep_latest",
    "agents.scripted.causal_privileged",
    "agents.learners.bandits",
    "agents.learners.value_keeper",
    "agents.sb3.agent",
    "agents.rllib.agent",
    "agents.exported.agent",
    "agents.external.exec_agent",
)


@dataclass(frozen=True)
class AgentEntry:
    name: str
    aliases: tuple[str, ...]
    track: str
    kind: str
    description: str
    cls: type[Agent]
    defaults: dict[str, Any]


REQUIRED = inspect.Parameter.empty  # the default of a parameter that has none


def _defaults(cls: type) -> dict[str, Any]:
    parameters = inspect.signature(cls.__init__).parameters.values()
    return {
        p.name: p.default for p in parameters if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }


def _entries() -> dict[str, AgentEntry]:
    entries: dict[str, AgentEntry] = {}
    for module_name in AGENT_MODULES:
        module = importlib.import_module(module_name)
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, Agent) and cls.__module__ == module.__name__):
                continue
            if "name" not in cls.__dict__:
                continue  # a shared base class
            entry = AgentEntry(
                name=cls.name,
                aliases=tuple(getattr(cls, "aliases", ())),
                track="the model's" if cls.kind in MODEL_KINDS else cls.track,
                kind=cls.kind,
                description=cls.description,
                cls=cls,
                defaults=_defaults(cls),
            )
            for key in (entry.name, *entry.aliases):
                if key.lower() in entries:
                    raise RuntimeError(f"agent name {key!r} is registered twice")
                entries[key.lower()] = entry
    return entries


_REGISTRY: dict[str, AgentEntry] | None = None


def _registry() -> dict[str, AgentEntry]:
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = _entries()
    return _REGISTRY


def list_agents() -> list[AgentEntry]:
    """Every registered agent once, in listing order."""
    seen: dict[str, AgentEntry] = {}
    for entry in _registry().values():
        seen.setdefault(entry.name, entry)
    return list(seen.values())


def agent_entry(name: str) -> AgentEntry:
    if not isinstance(name, str):
        raise TypeError(f"an agent name is a string, got {name!r}")
    entry = _registry().get(name.lower())
    if entry is None:
        known = ", ".join(e.name for e in list_agents())
        raise KeyError(f"no agent named {name!r}; known agents: {known} (spec aliases work too)")
    return entry


def make_agent(name: str, **params: Any) -> Agent:
    """A new agent by name or alias, with ``params`` overriding its defaults."""
    entry = agent_entry(name)
    unknown = sorted(set(params) - set(entry.defaults))
    if unknown:
        raise TypeError(f"agent {entry.name!r} has no parameter {unknown}; its parameters: {sorted(entry.defaults)}")
    return entry.cls(**params)


def registry_table() -> str:
    """The registry as a text table: name, aliases, track, kind, parameters, description."""
    rows = [("name", "aliases", "track", "kind", "parameters", "description")]
    for e in list_agents():
        params = ", ".join(f"{k}=<required>" if v is REQUIRED else f"{k}={v!r}" for k, v in e.defaults.items())
        rows.append((e.name, ", ".join(e.aliases), e.track, e.kind, params, e.description))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows)
