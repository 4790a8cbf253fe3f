"""Entry point: ``python cli.py …`` behaves as the ``embscope`` console script."""

import sys

from embscope.cli import main

if __name__ == "__main__":
    sys.exit(main())
