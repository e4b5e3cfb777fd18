"""The ``flowdesk`` console script: :func:`desktop_app.cli.main`, with a
Ctrl-C that lands while Python is still loading the command line ended as
one that lands later is (a message, exit status 130), not with a
traceback. It imports nothing of Flowdesk before that, so the window is
covered from the start."""

from __future__ import annotations

import sys


def main() -> None:
    """Load and run the command line; exit with its status.

    Raises:
        SystemExit: always (the command's exit status; 130 after a Ctrl-C
            while loading it).
    """
    try:
        from desktop_app.cli import main as cli_main
    except KeyboardInterrupt:
        print("flowdesk: interrupted while starting; nothing was done", file=sys.stderr)
        raise SystemExit(130) from None
    raise SystemExit(cli_main())
