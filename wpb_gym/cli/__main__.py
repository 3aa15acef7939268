"""``python -m wpb_gym.cli``: the same as ``wpb``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
