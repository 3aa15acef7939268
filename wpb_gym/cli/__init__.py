"""``wpb``, the command line: the commands (``commands``), the checks every flag and config
key goes through (``inputs``), and the settings files (``settings``, ``eval_settings``).

This is the one package that joins ``wpb_gym`` and ``agents``."""

from .commands import main

__all__ = ["main"]
