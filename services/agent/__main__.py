"""`python -m cairn.agent`: run the agent service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["agent", *sys.argv[1:]]))
