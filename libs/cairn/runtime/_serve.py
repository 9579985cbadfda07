"""`python -m cairn.runtime._serve SERVICE... [flags]`: `cairn run` without the CLI's imports, for
processes that `cairn up` starts (a parent starts faster without click)."""

import sys

from cairn.runtime.service import main

sys.exit(main())
