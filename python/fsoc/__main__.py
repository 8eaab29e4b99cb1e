"""`python -m fsoc`: see fsoc/_cli.py."""

import sys

from ._cli import main

sys.exit(main())
