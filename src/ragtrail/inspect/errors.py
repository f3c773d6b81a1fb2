"""Errors the inspector raises, each with the exit code the CLI returns and a hint saying what to do.

Every failure a user can cause (a wrong id, a broken file, a server that is down) maps to one line
on stderr and a distinct exit code, so scripts and CI can tell "no such trace" from "server down"
without parsing text. The table is part of the CLI's contract (``ragtrail --help``, docs/walkthrough.md).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_ALARMS = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_MALFORMED = 4
EXIT_UNREACHABLE = 5
EXIT_HTTP = 6
EXIT_NO_RAGTRAIL = 7
EXIT_TRUNCATED = 8
EXIT_BAD_CHECKPOINTS = 9
EXIT_BUSY = 10
EXIT_INTERNAL = 70

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "ok: nothing to report"),
    (EXIT_ALARMS, "alarms found (verify), or the traces differ (diff --exit-code)"),
    (EXIT_USAGE, "usage error (bad option or argument)"),
    (EXIT_NOT_FOUND, "trace not found in the source"),
    (EXIT_MALFORMED, "malformed input (not JSON, or not a trace format ragtrail reads)"),
    (EXIT_UNREACHABLE, "server unreachable or timed out"),
    (EXIT_HTTP, "server answered with an HTTP error (4xx/5xx)"),
    (EXIT_NO_RAGTRAIL, "the trace has no ragtrail spans"),
    (EXIT_TRUNCATED, "truncated file (it ends in the middle of a record)"),
    (EXIT_BAD_CHECKPOINTS, "bad checkpoint file (verify --checkpoints: unreadable, or its chain or MAC does not hold)"),
    (EXIT_BUSY, "the embedded engine's directory is in use by another ragtrail process (run again when it ends)"),
    (EXIT_INTERNAL, "internal error in ragtrail (a bug: please report it)"),
)


class InspectError(Exception):
    """A user-facing failure: ``message`` says what happened, ``hint`` what to do about it."""

    exit_code = EXIT_INTERNAL

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        """The single line the CLI prints (no traceback, ever)."""
        return f"{self.message}: {self.hint}" if self.hint else self.message


class UsageError(InspectError):
    exit_code = EXIT_USAGE


class TraceNotFound(InspectError):
    exit_code = EXIT_NOT_FOUND


class MalformedInput(InspectError):
    exit_code = EXIT_MALFORMED


class SourceUnreachable(InspectError):
    exit_code = EXIT_UNREACHABLE


class HttpStatusError(InspectError):
    exit_code = EXIT_HTTP


class NoRagtrailSpans(InspectError):
    exit_code = EXIT_NO_RAGTRAIL


class TruncatedInput(InspectError):
    exit_code = EXIT_TRUNCATED


class BadCheckpoints(InspectError):
    exit_code = EXIT_BAD_CHECKPOINTS


class EngineBusy(InspectError):
    """Another process holds the embedded engine's directory of this store (chdb admits one at a time)."""

    exit_code = EXIT_BUSY
