"""``python -m selection.reuse``: see ``cli.py``."""

import sys

from .cli import main

sys.exit(main())
