"""`python -m cairn.signer`: run the signer service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["signer", *sys.argv[1:]]))
