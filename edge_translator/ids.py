"""``new_id``: the ids the edge makes (answers, output items, request ids
of early errors), once for every client API.

An id is its kind's prefix and 128 random bits in hex, from the operating
system's generator: no id tells another (a counter shared by every tenant of
a process showed one tenant how many answers another got between two of its
own), none can be guessed, and ids from any worker or instance never meet.
Pure: no I/O beyond ``os.urandom``.
"""

from __future__ import annotations

import os

__all__ = ["new_id"]


def new_id(prefix: str) -> str:
    """A fresh id: ``prefix`` (``"chatcmpl-"``, ``"msg_"``, ``"resp_"``)
    and 32 hex digits."""
    return prefix + os.urandom(16).hex()
