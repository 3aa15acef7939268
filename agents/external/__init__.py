"""Agents that are other programs: the ``wpb-agent/1`` protocol and ``exec:PATH``."""
