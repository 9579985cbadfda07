"""Reading the files people hand Cairn, at bounded cost: the one place that opens them.

Every file a command or a service reads as input (job specs, site and federation files,
recipes, credentials, JWTs, roots, trust lists, evidence bundles, snapshots) is read here:

- only a regular file is read: a FIFO, a device (`/dev/zero`), a socket or a folder is
  refused at `open`, which never blocks (`O_NONBLOCK`), so nothing waits on a writer;
- never more than its limit: a file whose size is over it is refused before a byte is
  read, and one that grows while it is read is cut off one byte past the limit;
- text must be UTF-8; the error names the first bad byte and its offset.

Every refusal is one `InvalidInput` naming the file (exit 3): never a traceback.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from cairn.errors import InvalidInput

KIB = 1024
MIB = 1024 * KIB

SMALL_FILE_BYTES = 64 * KIB
"""Keys, seeds, `.creds` files, JWTs, roots lists, provisioning requests: a few KiB at most."""
PEM_FILE_BYTES = 1 * MIB
"""A CA bundle or certificate chain."""

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def read_bytes(path: str | Path, *, limit: int, shown: str | None = None,
               limit_name: str | None = None) -> bytes:
    """The content of a regular file of at most `limit` bytes.

    Args:
        shown: how the file is named in errors (the path itself when not given).
        limit_name: the setting that changes `limit`, named in the too-large error.

    Raises:
        InvalidInput: naming the file: missing, unreadable, not a regular file, or larger
            than `limit`.
    """
    file = shown or str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InvalidInput("file not found", file=file) from None
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket, or a FIFO opened some other way
            raise InvalidInput("not a regular file", file=file) from None
        raise InvalidInput(f"cannot read: {exc.strerror or exc}", file=file) from None
    try:
        mode = os.fstat(fd)
        for is_kind, kind in _KINDS:
            if is_kind(mode.st_mode):
                raise InvalidInput(f"not a regular file ({kind})", file=file)
        if mode.st_size > limit:
            raise too_large(file, limit, limit_name)
        chunks: list[bytes] = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError as exc:
        raise InvalidInput(f"cannot read: {exc.strerror or exc}", file=file) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > limit:
        raise too_large(file, limit, limit_name)
    return data


def read_text(path: str | Path, *, limit: int, shown: str | None = None,
              limit_name: str | None = None) -> str:
    """The UTF-8 text of a regular file of at most `limit` bytes (see `read_bytes`).

    Raises:
        InvalidInput: as `read_bytes`, or the content is not UTF-8.
    """
    file = shown or str(path)
    return decode_utf8(read_bytes(path, limit=limit, shown=file, limit_name=limit_name), file)


def decode_utf8(data: bytes, file: str) -> str:
    """`data` as UTF-8 text, or an `InvalidInput` naming the file and the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8: byte {data[exc.start]:#04x} at byte offset {exc.start}",
                           file=file) from None


def check_regular(path: str | Path, *, limit: int, shown: str | None = None) -> None:
    """Refuse, as `read_bytes` would, a path that another library is about to read itself
    (the ssl module reads certificate files by name)."""
    read_bytes(path, limit=limit, shown=shown)


def too_large(file: str, limit: int, limit_name: str | None = None) -> InvalidInput:
    setting = f" ({limit_name})" if limit_name else ""
    return InvalidInput(f"larger than the limit of {limit} bytes{setting}", file=file)


def yaml_text(data: object) -> str:
    """`data` as block YAML, keys in their order: through libyaml's emitter where PyYAML has
    it (ten times the pure-Python one's speed: a thousand sites' files are written at start)."""
    import yaml

    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False)
