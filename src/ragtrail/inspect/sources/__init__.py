"""Where traces come from: files and the local store, Jaeger (v3 then v1 API), Grafana Tempo, Arize Phoenix and ClickHouse.

A source is named by one string (``--source`` or ``RAGTRAIL_SOURCE``): a file or directory path,
``jaeger+http://127.0.0.1:16686``, ``tempo+http://127.0.0.1:3200`` or ``clickhouse+http://127.0.0.1:8123/otel``
(``+https`` works too). Each
source returns :class:`~ragtrail.inspect.model.Trace` objects and can list recent ragtrail traces
for ``verify --search``. Every failure is an :class:`~ragtrail.inspect.errors.InspectError` with a
one-line message and a hint: the CLI never shows a traceback for bad input or a dead server.

One module per source (``files``, ``jaeger``, ``tempo``, ``phoenix``, ``clickhouse``) on a shared ``base`` and, for
servers, the public :class:`HttpSource`; this module names them and picks one from a spec.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrail.contract import semconv as sc

from ..errors import TraceNotFound, UsageError
from ..model import Trace, is_trace_id
from .base import DEFAULT_STORE, DEFAULT_TIMEOUT, ENV_SOURCE, Progress, Source, lookback_seconds
from .clickhouse import ClickHouseSource
from .documents import group_traces, loads, spans_from_document
from .files import FileSource, path_exists
from .http import HttpSource
from .jaeger import JaegerSource
from .phoenix import PhoenixSource
from .tempo import TempoSource

if TYPE_CHECKING:  # httpx is imported only when a server is read: it costs ~60 ms of every CLI start
    import httpx

__all__ = [
    "DEFAULT_STORE",
    "DEFAULT_TIMEOUT",
    "ENV_SOURCE",
    "MAX_PATH_ARGUMENT",
    "ClickHouseSource",
    "FileSource",
    "HttpSource",
    "JaegerSource",
    "PhoenixSource",
    "Progress",
    "Source",
    "TempoSource",
    "group_traces",
    "loads",
    "lookback_seconds",
    "open_source",
    "resolve",
    "spans_from_document",
]

SERVERS: dict[str, type[HttpSource]] = {
    "jaeger+": JaegerSource,
    "tempo+": TempoSource,
    "phoenix+": PhoenixSource,
    "clickhouse+": ClickHouseSource,
}
"""The HTTP sources by the prefix that names them in ``--source`` (``jaeger+http://HOST:16686``)."""


def open_source(
    spec: str | None, *, timeout: float = DEFAULT_TIMEOUT, progress: Progress | None = None, transport: httpx.BaseTransport | None = None
) -> Source:
    """A source from its name; ``None`` means ``$RAGTRAIL_SOURCE`` or the local store ``./.ragtrail``."""
    spec = spec or os.environ.get(ENV_SOURCE) or DEFAULT_STORE
    for prefix, cls in SERVERS.items():
        if spec.startswith(prefix):
            url = spec[len(prefix) :]
            if not url.startswith(("http://", "https://")):
                raise UsageError(f"bad source {spec!r}", f"use {prefix}http://HOST:PORT")
            return cls(url, timeout=timeout, transport=transport)
    if spec.startswith(("http://", "https://")):
        raise UsageError(f"source {spec!r} does not say which backend it is", f"use jaeger+{spec} or tempo+{spec}")
    return FileSource(spec, progress=progress)


MAX_PATH_ARGUMENT = 4096  # PATH_MAX on Linux: a longer TRACE is neither an id nor a file


def resolve(
    ref: str,
    source_spec: str | None,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    progress: Progress | None = None,
    transport: httpx.BaseTransport | None = None,
) -> Trace:
    """A trace from what the user typed: a trace id, ``last``, or a path to a file holding one trace."""
    if not ref.strip():
        # Path("") is the current folder: reading every *.json under it is never what was meant
        raise UsageError("the TRACE argument is empty", "pass a 32-digit hex trace id, `last`, or a path")
    if len(ref) > MAX_PATH_ARGUMENT:
        raise UsageError(
            f"the TRACE argument is {len(ref)} characters long: neither a trace id nor a path", "pass a 32-digit hex trace id, `last`, or a path"
        )
    path = Path(ref)
    if not is_trace_id(ref) and ref != "last" and (path_exists(path) or "/" in ref or ref.endswith((".json", ".jsonl"))):
        traces = FileSource(path, progress=progress).all_traces()
        if not traces:
            raise TraceNotFound(f"no traces in {path}", "pass a file that holds OTLP JSON, Jaeger or Tempo JSON")
        with_ragtrail = [t for t in traces if any(sc.STAGE_KIND in s.attributes for s in t.spans)]
        if len(with_ragtrail) > 1:
            raise UsageError(f"{path} holds {len(with_ragtrail)} ragtrail traces", f"pick one: ragtrail show TRACE_ID --source {path} (or `last`)")
        return (with_ragtrail or traces)[0]
    source = open_source(source_spec, timeout=timeout, progress=progress, transport=transport)
    try:
        if ref == "last":
            ref = source.latest()
        if not is_trace_id(ref):
            raise UsageError(
                f"{ref[:80]!r}{'…' if len(ref) > 80 else ''} is neither a trace id (hex), `last`, nor an existing file",
                "pass a 32-digit hex trace id, `last`, or a path",
            )
        return source.get(ref)
    finally:
        close = getattr(source, "close", None)
        if close:
            close()
