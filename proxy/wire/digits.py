"""``read_decimal``: a non-negative integer as HTTP writes one (a
``Content-Length``, a query's ``limit``), read strictly, once for the edge,
the proxy and the transports.

``str.isdigit`` is true of ``"²"`` and ``"٣"``, which ``int`` refuses or reads
as another number, and ``int`` raises on a string of more than 4,300 digits:
a check that uses them lets a caller's header or query out as a 500. Here a
number is 1 to ``max_digits`` ASCII digits and nothing else. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_DIGITS", "read_decimal"]

# Enough for any byte count or page size (10**18 bytes is an exabyte).
MAX_DIGITS: Final = 18


def read_decimal(text: str, max_digits: int = MAX_DIGITS) -> int | None:
    """``text`` as an integer: 1 to ``max_digits`` ASCII digits (``None``
    for anything else: a sign, a space, another script's digit, more digits)."""
    if 0 < len(text) <= max_digits and text.isascii() and text.isdigit():
        return int(text)
    return None
