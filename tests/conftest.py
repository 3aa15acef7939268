"""Shared test settings: property tests are derandomised so every run checks the same cases;
``core_makes_every_episode`` for tests of the episodes the vector env's core makes."""

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "deterministic",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("deterministic")


@pytest.fixture
def core_makes_every_episode(monkeypatch):
    """The vector env's core makes and reads every generated episode, as it does those past the
    bounds of the ones it compiles from their draws (which are slow to make)."""
    from wpb_gym.envs.fast import core

    monkeypatch.setattr(core, "_from_draws", lambda recipe: None)
    monkeypatch.setattr(core, "drawn_compilable", lambda recipe: False)  # the batched start's test
