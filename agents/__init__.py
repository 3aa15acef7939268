"""Policies that act on WritePolicyBench: scripted baselines, bandit learners, SB3 models.

This package depends on ``wpb_gym`` (never the other way round). Its contents arrive with
the agents issue; the package exists now so that installation and the import boundary
between the benchmark core and the agents are fixed from the start.
"""
