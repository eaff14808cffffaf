"""`python -m texpr_ad ...` is the `texpr-ad` command (see texpr_ad/report/cli.py)."""
import sys

from .report.cli import main

if __name__ == "__main__":
    sys.exit(main())
