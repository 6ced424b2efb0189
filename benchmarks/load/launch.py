"""``python -m benchmarks.load.launch TARGET INTERFACE PORT``: serve a granian factory.

Starts ``TARGET`` (``module:factory``) on 127.0.0.1 with the settings the
``flatgate`` CLI gives the proxy (one worker, factory mode, the ``auto`` loop,
``warning`` logs, no access log), so the load bench's baselines run under the
very same server as the product. Nothing else.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from granian import Granian
from granian.constants import Interfaces, Loops
from granian.log import LogLevels

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3 or args[1] not in ("asgi", "rsgi") or not args[2].isdigit():
        print(
            "usage: python -m benchmarks.load.launch module:factory asgi|rsgi PORT", file=sys.stderr
        )
        return 2
    target, interface, port = args[0], args[1], int(args[2])
    Granian(
        target,
        address="127.0.0.1",
        port=port,
        workers=1,
        interface=Interfaces.RSGI if interface == "rsgi" else Interfaces.ASGI,
        factory=True,
        loop=Loops.auto,
        log_level=LogLevels.warning,
        log_access=False,
    ).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
