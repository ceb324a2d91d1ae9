"""``python -m crcr_reuse``: see ``cli.py``."""

import sys

from .cli import main

sys.exit(main())
