"""Agents that follow fixed rules: the paper's baselines, ``breaking_detector``, the oracle
bounds, the rules written over the env's observation, and what an unprivileged agent can tell
about a step (``observe``)."""
