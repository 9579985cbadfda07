"""Kubernetes resource quantities: parse to integers, format back for people.

CPUs become millicpus (`500m` -> 500, `1.5` -> 1500), memory becomes bytes (`512Mi`, `1G`,
`1.5Gi`), GPUs are whole numbers. Integers are what the agent adds and compares when it
allocates, so no float ever reaches an allocation.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from cairn.errors import InvalidInput

_QUANTITY = re.compile(
    r"^(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<exp>[eE][+-]?[0-9]+)?"
    r"(?P<suffix>[A-Za-z]*)$"
)

BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}

# Upper bounds (docs/limits.md): far above any one site or worker, low enough that a slip
# such as `1e99` is an error at load instead of a 100-digit number that queues forever.
MAX_GPUS = 100_000
MAX_MILLICPUS = 10_000_000 * 1000
MAX_MEMORY_BYTES = 2**60
# No quantity has more digits before its point than this; refused before any arithmetic,
# so `1e999999999` never becomes a billion-digit integer.
_MAX_MAGNITUDE = 30


def _number(value: object, what: str) -> tuple[Decimal, str]:
    """Split a quantity into its number and suffix; bools and other types are refused."""
    # YAML turns `yes`/`true` into bools, and bool is an int subclass: refuse it explicitly.
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise InvalidInput(f"{value!r} is not a {what} quantity")
    if isinstance(value, int) and value.bit_length() > 128:
        raise InvalidInput(f"a number that long is far too large for a {what} quantity")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise InvalidInput(f"{value!r} is not a {what} quantity")
        if value < 0:
            raise InvalidInput(f"{value!r} is negative; a {what} quantity is at least 0")
        return _bounded(Decimal(str(value)), value, what), ""
    match = _QUANTITY.fullmatch(value.strip())
    if not match:
        raise InvalidInput(
            f"{value!r} is not a {what} quantity (examples: "
            + ("'500m', '2', '1.5'" if what == "cpus" else "'512Mi', '4Gi', '1G'")
            + ")"
        )
    try:
        number = Decimal(match.group("num") + (match.group("exp") or ""))
    except InvalidOperation:
        raise InvalidInput(f"{value!r} is not a {what} quantity") from None
    return _bounded(number, value, what), match.group("suffix")


def _bounded(number: Decimal, value: object, what: str) -> Decimal:
    if number and number.adjusted() >= _MAX_MAGNITUDE:
        text = repr(value)
        raise InvalidInput(f"{text if len(text) <= 40 else text[:37] + '...'} is far too large "
                           f"for a {what} quantity")
    return number


def _at_most(amount: int, bound: int, value: object, what: str, shown: str) -> int:
    if amount > bound:
        raise InvalidInput(f"{value!r} is more than the limit of {shown} {what}")
    return amount


def parse_cpus(value: object) -> int:
    """`500m` -> 500, `2` -> 2000, `1.5` -> 1500 millicpus.

    Raises:
        InvalidInput: not a quantity, negative, or finer than one millicpu.
    """
    number, suffix = _number(value, "cpus")
    if suffix == "m":
        milli = number
    elif suffix in DECIMAL:
        milli = number * DECIMAL[suffix] * 1000
    elif suffix == "":
        milli = number * 1000
    else:
        raise InvalidInput(f"{value!r}: unknown cpus suffix {suffix!r} (use 'm' or none)")
    if milli != milli.to_integral_value():
        raise InvalidInput(f"{value!r} is finer than 1m (one thousandth of a CPU)")
    return _at_most(int(milli), MAX_MILLICPUS, value, "CPUs", format_cpus(MAX_MILLICPUS))


def parse_memory(value: object) -> int:
    """`512Mi`, `4Gi`, `1G`, `1000`, `1.5Gi` -> bytes.

    Raises:
        InvalidInput: not a quantity, negative, or not a whole number of bytes.
    """
    number, suffix = _number(value, "memory")
    if suffix in BINARY:
        count = number * BINARY[suffix]
    elif suffix in DECIMAL:
        count = number * DECIMAL[suffix]
    elif suffix == "":
        count = number
    else:
        # `m` is milli in Kubernetes, so `512m` is half a byte, not 512 MB: a common slip.
        hint = " ('m' means thousandths; did you mean 'Mi'?)" if suffix == "m" else ""
        raise InvalidInput(
            f"{value!r}: unknown memory suffix {suffix!r}{hint}; use one of "
            + ", ".join([*BINARY, *DECIMAL])
        )
    if count != count.to_integral_value():
        raise InvalidInput(f"{value!r} is not a whole number of bytes")
    return _at_most(int(count), MAX_MEMORY_BYTES, value, "of memory",
                    format_memory(MAX_MEMORY_BYTES))


def parse_gpus(value: object) -> int:
    """GPUs are whole devices: `0`, `2`, `"4"`; `0.5` and `500m` are refused."""
    number, suffix = _number(value, "gpus")
    if suffix or number != number.to_integral_value():
        raise InvalidInput(f"{value!r} is not a whole number of GPUs (GPUs are not shared)")
    return _at_most(int(number), MAX_GPUS, value, "GPUs", str(MAX_GPUS))


def format_cpus(millicpus: int) -> str:
    """500 -> '500m', 2000 -> '2', 1500 -> '1.5'."""
    if millicpus % 1000 == 0:
        return str(millicpus // 1000)
    if millicpus % 100 == 0 and millicpus > 1000:
        # Decimal, not float formatting: `:g` would round 123456.7 to 123457.
        return f"{(Decimal(millicpus) / 1000).normalize():f}"
    return f"{millicpus}m"


def format_memory(count: int) -> str:
    """Bytes as the shortest exact quantity: 536870912 -> '512Mi', 10**9 -> '1G'.

    The result always parses back to the same number (`parse_memory(format_memory(n)) == n`).
    """
    best = str(count)
    for table in (BINARY, DECIMAL):
        for suffix, size in table.items():
            if count < size:
                continue
            scaled = Decimal(count) / size
            # Up to two decimals keeps strings like '1.5Gi' while staying exact.
            if scaled * 100 != (scaled * 100).to_integral_value():
                continue
            text = f"{scaled.normalize():f}" + suffix
            if len(text) < len(best):
                best = text
    return best
