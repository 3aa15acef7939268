"""``python -m wpb_gym.cli``: the same as ``wpb``."""

import sys

from . import main

sys.exit(main())
