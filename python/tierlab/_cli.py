"""The ``tierlab`` console script: the Rust CLI, run in this process.

Installing the Python package puts this ``tierlab`` on PATH; it is the same
program as ``target/release/tierlab`` (``tierlab_cli::main_with_args``).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Sequence

from . import _native


def run_cli(args: Sequence[str]) -> int:
    """Run the ``tierlab`` command line with ``args`` (without the program
    name) in this process and return its exit code.

    Output goes straight to the process's standard output and error (file
    descriptors 1 and 2), not through ``sys.stdout``. The GIL is released
    while the command runs.

    >>> tierlab.run_cli(["trace", "stats", "trace.csv", "--json"])  # doctest: +SKIP
    0
    """
    if isinstance(args, (str, bytes)):
        raise TypeError("run_cli takes a list of arguments, not one string")
    sys.stdout.flush()
    sys.stderr.flush()
    return _native.run_cli([str(a) for a in args])


def main() -> int:
    """Entry point of the ``tierlab`` console script."""
    # Behave like the native binary: Ctrl-C ends the command at once (Python's
    # handler would only run after the Rust code returns), and writing to a
    # closed pipe (`tierlab ... | head`) ends it quietly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return run_cli(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
