"""`python -m cairn.validator`: run the validator service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["validator", *sys.argv[1:]]))
