"""The exit statuses and the error line every entry point shares (docs/reference/entry-points.md has the table).

One enum, so a script or CI job can tell "the input was wrong, nothing was sent" (2) from "the
run went but failed" (1) whichever command it called; a new status (MLflow could not log, a
budget cap reached) is one more member here and one more row in the table. The error line is
Hydra's job-logging format, so a Hydra app (whose handlers are configured by then) and an
argparse one print the same thing: ``[time][wildtrace][ERROR] - <prog>: error: <message>``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from enum import IntEnum
from typing import NoReturn


class ExitCode(IntEnum):
    """How a wildtrace command ended. 5..127 are free for statuses still to come."""

    OK = 0  #: done: the run finished, the files were written, the check passed
    RUN_FAILED = 1  #: it ran, and failed: every call of an endpoint failed, a store failed, a check failed
    BAD_INPUT = 2  #: refused before any request: a config, key, file or argument error (nothing sent)
    NOT_LOGGED = 3  #: finished, but MLflow could not log it (main's EXIT_NOT_LOGGED: mlflow.required, upload)
    BUDGET = 4  #: a spend cap kept calls from being sent (main's EXIT_BUDGET, docs/providers/cost.md)
    SIGINT = 130  #: stopped by Ctrl-C (the shell's 128 + 2); what arrived is kept
    SIGTERM = 143  #: stopped by SIGTERM (128 + 15); what arrived is kept


#: Exit status for a stop by signal number; an unlisted signal counts as an interrupt.
SIGNAL_EXIT = {signal.SIGINT: ExitCode.SIGINT, signal.SIGTERM: ExitCode.SIGTERM}
#: Hydra's job-logging format, also used where Hydra has not configured logging.
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"
#: The logger every entry point reports its errors through.
log = logging.getLogger("wildtrace")


def ensure_stderr_logging() -> None:
    """A stderr handler in the common format when nothing configured logging yet (argparse commands, pre-Hydra).

    The root level is left as it is: the handler is there for warnings and errors, not to
    start showing every library's INFO records.
    """
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        root.addHandler(handler)


def error(prog: str, message: object) -> None:
    """Report one error in the common format: ``<prog>: error: <message>`` through the ``wildtrace`` logger."""
    ensure_stderr_logging()
    log.error("%s: error: %s", prog, message)


def fail(prog: str, message: object, code: ExitCode = ExitCode.BAD_INPUT) -> NoReturn:
    """Report ``message`` as an error and exit with ``code`` (bad input unless told): no traceback."""
    error(prog, message)
    raise SystemExit(int(code)) from None


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are the common error line (exit 2), after the usage text as argparse has it,
    and whose ``--help`` says what the command is before its usage."""

    def format_help(self) -> str:
        """The description first (as plain text), then argparse's usage and options."""
        description, self.description = self.description, None
        try:
            rest = super().format_help()
        finally:
            self.description = description
        if not description:
            return rest
        formatter = self._get_formatter()
        formatter.add_text(description.replace("``", ""))  # a module docstring's literals, as plain text
        return formatter.format_help() + "\n" + rest

    def error(self, message: str) -> NoReturn:
        """A bad argument: the usage on stderr, then ``<prog>: error: <message>``, exit 2."""
        self.print_usage(sys.stderr)
        fail(self.prog, message)
