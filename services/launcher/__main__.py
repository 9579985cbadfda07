"""`python -m cairn.launcher`: run the launcher service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["launcher", *sys.argv[1:]]))
