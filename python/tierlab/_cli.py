"""The ``tierlab`` console script: the Rust CLI, run in this process.

Installing the Python package puts this ``tierlab`` on PATH; it is the same
program as ``target/release/tierlab`` (``tierlab_cli::main_with_args``), plus
the commands written in Python: ``tierlab report DIR``, ``tierlab sweep``,
``--report`` on ``sim``/``reproduce``, and the demo's HTML report.
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


#: Subcommands implemented in Python (the Rust CLI does not know them).
PYTHON_COMMANDS = {
    "report": "Write the self-contained HTML report of an output directory",
    "sweep": "Run a grid of simulations (configs x parameters x traces), locally or on Ray",
}

_PYTHON_HELP = """
Commands of the Python package (this `tierlab`):
  report  {report}
  sweep   {sweep}
  bench --compare  Each benchmark next to its peer (fio, libCacheSim, nbdkit), as ratios
and, with --report, `tierlab sim ... --out DIR --report` and
`tierlab reproduce SYSTEM ... --out DIR --report` also write DIR/report.html;
`tierlab demo` writes it unless --no-report is given.
"""


def _out_dir(args: list[str]) -> str | None:
    for i, a in enumerate(args):
        if a == "--out" and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--out="):
            return a[len("--out=") :]
    return None


def _with_report(args: list[str], flag: str, default: bool) -> int:
    """Runs the Rust command ``args`` (without ``flag``), then writes the
    report of its --out directory when asked (or by default)."""
    wanted = default
    if flag in args:
        args = [a for a in args if a != flag]
        wanted = not default
    code = run_cli(args)
    if code != 0 or not wanted or any(a in ("-h", "--help") for a in args):
        return code
    out = _out_dir(args)
    if out is None:
        return code
    from .report import write_report

    try:
        path = write_report(out)
    except (OSError, ValueError) as e:
        print(f"tierlab: error: report: {e}", file=sys.stderr)
        return 1
    print(f"  report: {path}")
    return 0


def dispatch(args: list[str]) -> int:
    """The console script's command line: Python-side commands (``report``,
    ``sweep``, the ``--report`` option and the demo's report), everything
    else straight to the Rust CLI."""
    # The command is the first argument that is not a global flag.
    rest = [a for a in args if a not in ("-q", "--quiet")]
    command = rest[0] if rest else None
    if command == "report":
        from .report import main as report_main

        return report_main(rest[1:])
    if command == "sweep":
        from .sweep import main as sweep_main

        return sweep_main(rest[1:], quiet=len(rest) != len(args))
    if command == "bench" and "--compare" in rest:
        from .bench import main as bench_main

        return bench_main(rest[1:] + (["-q"] if len(rest) != len(args) else []))
    if command == "demo":
        return _with_report(args, "--no-report", default=True)
    if command in ("sim", "reproduce"):
        return _with_report(args, "--report", default=False)
    code = run_cli(args)
    if command in (None, "help", "-h", "--help") and code in (0, 2):
        sys.stdout.flush()
        print(_PYTHON_HELP.format(**PYTHON_COMMANDS))
    return code


def main() -> int:
    """Entry point of the ``tierlab`` console script."""
    # Behave like the native binary: Ctrl-C ends the command at once (Python's
    # handler would only run after the Rust code returns), and writing to a
    # closed pipe (`tierlab ... | head`) ends it quietly.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return dispatch(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
