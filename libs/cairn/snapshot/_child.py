"""One local snapshot in a process of its own: `python -m cairn.snapshot._child SITE NODE`
writes it, encoded (`cairn.snapshot.model.encode`), on stdout.

The snapshotter collects this way: the collectors import the Docker SDK, NVML and their
dependencies, and a collection allocates more than the rest of an idle site parent holds
(about 20 MiB); in a child, all of it is given back when the child exits, and the parent
stays small between snapshots.
"""

from __future__ import annotations

import sys

from cairn.snapshot.collect import collect_local
from cairn.snapshot.model import encode


def main(argv: list[str]) -> int:
    site, node = argv
    sys.stdout.buffer.write(encode(collect_local(site, node_name=node or None)))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
