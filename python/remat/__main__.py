"""The ``remat`` command line: what ``pip install`` puts on PATH as ``remat``,
and what ``python -m remat`` runs. The same code as the Rust binary's
(``remat._core.main``): the same commands, output and exit codes."""

from __future__ import annotations

import signal
import sys


def main(argv: list[str] | None = None) -> int:
    """Runs ``remat`` on ``argv`` (default: this process's arguments, the
    program name excluded) and returns its exit code."""
    from remat import _core

    # As for the Rust binary: Ctrl-C ends a long solve at once (Python's own
    # handler would only run after the solve returns).
    if hasattr(signal, "SIGINT"):
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    # The command writes to the process's stdout itself: what Python has
    # buffered goes first.
    sys.stdout.flush()
    sys.stderr.flush()
    return int(_core.main(["remat", *(sys.argv[1:] if argv is None else argv)]))


if __name__ == "__main__":
    sys.exit(main())
