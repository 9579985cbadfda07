"""`python -m cairn.coordinator`: run the coordinator service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["coordinator", *sys.argv[1:]]))
