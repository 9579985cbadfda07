"""`python -m cairn.httpapi`: run the HTTP API service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["httpapi", *sys.argv[1:]]))
