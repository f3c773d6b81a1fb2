"""``ragtrail``: read retrieval manifests back from traces (show, verify, diff, report), over many traces
(ls, stats, compare), gate CI on them (gate run, gate baseline), and run the demo.

The group is assembled here, and only here, from the command modules: none of them knows the group.
Every failure a user can cause prints one line saying what to do and exits with its own code
(see ``ragtrail --help``); a traceback means a bug in ragtrail (set ``RAGTRAIL_DEBUG=1`` to see it).
"""

from __future__ import annotations

import os
import sys

import click
from rich.text import Text

from ragtrail.cli.console import stderr
from ragtrail.cli.gate import gate
from ragtrail.cli.many_traces import compare_cmd, ls_cmd, stats_cmd
from ragtrail.cli.one_trace import demo, diff_cmd, report, show, verify
from ragtrail.inspect import errors
from ragtrail.inspect.errors import EXIT_CODES, InspectError
from ragtrail.inspect.safe import plain

__all__ = ["cli", "main"]

_EXIT_TABLE = "\n".join(f"  {code:<3} {text}" for code, text in EXIT_CODES)
_EPILOG = f"""\b
Sources (--source, or RAGTRAIL_SOURCE; default ./.ragtrail, the local store):
  PATH                          OTLP JSON lines (local store, Collector file exporter), OTLP/Jaeger/Tempo JSON
  jaeger+http://HOST:16686      Jaeger (API v3, falling back to v1)
  tempo+http://HOST:3200        Grafana Tempo (API v2, falling back to v1)
  phoenix+http://HOST:6006      Arize Phoenix (REST API v1; /projects/NAME for one project)
  clickhouse+http://HOST:8123   ClickHouse (the Collector exporter's otel_traces; /DATABASE, default otel)
TRACE is a hex trace id, `last` (the most recent trace), or a file holding one trace.

\b
Exit codes:
{_EXIT_TABLE}
"""


@click.group(epilog=_EPILOG, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(package_name="ragtrail", prog_name="ragtrail")
def cli() -> None:
    """Read the retrieval manifest back from a RAG trace: what was retrieved, what was excluded and why,
    what was cited, and whether the trail arrived as it was stamped."""


# one trace
cli.add_command(show)
cli.add_command(verify)
cli.add_command(diff_cmd)
cli.add_command(report)
cli.add_command(demo)
# many traces
cli.add_command(ls_cmd)
cli.add_command(stats_cmd)
cli.add_command(compare_cmd)
# the CI gate (a group: gate run, gate baseline)
cli.add_command(gate)


def main(argv: list[str] | None = None) -> None:
    """Console script entry point: one line and a distinct exit code per failure, never a traceback."""
    debug = os.environ.get("RAGTRAIL_DEBUG", "") not in ("", "0")
    try:
        code = cli.main(args=argv, prog_name="ragtrail", standalone_mode=False)
    except InspectError as exc:
        stderr().print(Text(f"ragtrail: error: {plain(exc.one_line())}"), soft_wrap=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        stderr().print("ragtrail: interrupted", markup=False)
        sys.exit(130)
    except click.ClickException as exc:
        hint = "run `ragtrail --help`" if not isinstance(exc, click.UsageError) or exc.ctx is None else f"run `{exc.ctx.command_path} --help`"
        stderr().print(Text(f"ragtrail: error: {plain(exc.format_message())}: {hint}"), soft_wrap=True)
        sys.exit(errors.EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except Exception as exc:  # a bug in ragtrail: still one line unless asked for the traceback
        if debug:
            raise
        stderr().print(
            Text(f"ragtrail: internal error: {type(exc).__name__}: {plain(exc)}: please report it (RAGTRAIL_DEBUG=1 shows the traceback)"),
            soft_wrap=True,
        )
        sys.exit(errors.EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)
