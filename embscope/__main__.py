"""``python -m embscope …`` runs the command line."""

import sys

from embscope.cli import main

sys.exit(main())
