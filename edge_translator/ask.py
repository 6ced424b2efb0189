"""One request on its way through the edge: ``Ask``, what the app's steps
share from the request's head to its answer.

Holds the request's log entry, the body bytes it holds against admission
control, its caller and what its limits charged, its FlatBuffer until the
proxy has it, and what its answer needs of the request (never the prompt).
Plain data: no I/O, no behaviour.
"""

from __future__ import annotations

from flatgate.edge_translator.answer import CHAT, ClientApi
from flatgate.edge_translator.keys import Identity
from flatgate.edge_translator.tenancy import Admitted
from flatgate.proxy.plumbing.accesslog import Entry
from flatgate.proxy.plumbing.admission import Hold
from flatgate.proxy.plumbing.drain import Ending
from flatgate.proxy.wire.frames import Usage

__all__ = ["Ask"]


class Ask:
    """One completion request on its way: its log entry, the body bytes it
    holds against admission control, its FlatBuffer until the proxy has it,
    and what its answer needs of the request (never the prompt)."""

    __slots__ = (
        "admitted",
        "answered",
        "api",
        "choices",
        "completion_id",
        "early",
        "ending",
        "entry",
        "frame",
        "hold",
        "identity",
        "include_usage",
        "model",
        "stream",
        "usage",
    )

    def __init__(self, entry: Entry, hold: Hold, identity: Identity, early: Admitted) -> None:
        self.entry = entry
        self.hold = hold
        self.identity = identity
        # What admit_caller charged before the body was read.
        self.early = early
        self.frame = b""
        self.completion_id = ""
        self.model = ""
        self.stream = False
        self.choices = 1
        self.include_usage = False
        self.ending = Ending()
        # The client API the answer is rendered in.
        self.api: ClientApi = CHAT
        # The usage the backend reported (None: none, or no answer yet), and
        # whether an answer began (the proxy said 200).
        self.usage: Usage | None = None
        self.answered = False
        self.admitted: Admitted | None = None
