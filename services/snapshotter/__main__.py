"""`python -m cairn.snapshotter`: run the snapshotter service (flags as for `cairn run`)."""

import sys

from cairn.runtime.service import main

sys.exit(main(["snapshotter", *sys.argv[1:]]))
