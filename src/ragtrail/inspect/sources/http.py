"""The base of the sources read over HTTP (Jaeger, Tempo, Phoenix): one client, one-line errors for
every failure (timeout, refused connection, HTTP status, malformed body), and a trace from any JSON
shape the servers answer with.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal, overload

from ..errors import HttpStatusError, MalformedInput, SourceUnreachable
from ..gc_pause import gc_paused
from ..model import Span, Trace
from .base import DEFAULT_TIMEOUT
from .documents import group_traces, loads, spans_from_document, too_deep
from .paging import SearchResult

if TYPE_CHECKING:  # httpx is imported only when a server is read: it costs ~60 ms of every CLI start
    import httpx


class HttpSource(ABC):
    """A trace server at ``base_url``: one client, and one-line errors for every way a request fails.

    A subclass per server names it and implements :class:`~ragtrail.inspect.sources.base.Source`'s
    ``get``, ``latest`` and ``search`` with :meth:`fetch`, :meth:`json_body` and :meth:`trace_from`."""

    name = "server"
    page_size = 1000
    """Traces asked for in one search request (a server that pages by time windows asks this many per window)."""

    def __init__(self, base_url: str, timeout: float = DEFAULT_TIMEOUT, transport: httpx.BaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.description = f"{self.name} at {self.base_url}"
        import httpx

        self.client = httpx.Client(base_url=self.base_url, timeout=timeout, transport=transport)

    @overload
    def fetch(self, path: str, params: dict[str, Any] | None = None, allow_404: Literal[False] = False) -> httpx.Response: ...

    @overload
    def fetch(self, path: str, params: dict[str, Any] | None = None, *, allow_404: bool) -> httpx.Response | None: ...

    def fetch(self, path: str, params: dict[str, Any] | None = None, allow_404: bool = False) -> httpx.Response | None:
        """The response; ``None`` only for a 404 when ``allow_404``. Other failures raise."""
        import httpx

        try:
            response = self.client.get(path, params=params)
        except httpx.TimeoutException:
            raise SourceUnreachable(
                f"{self.description} timed out on {path}", "check the server is up and not overloaded, or raise --timeout"
            ) from None
        except httpx.TransportError as exc:
            raise SourceUnreachable(
                f"cannot reach {self.description} ({type(exc).__name__})", "start the server or fix --source / RAGTRAIL_SOURCE"
            ) from None
        if response.status_code == 404 and allow_404:
            return None
        if response.status_code >= 400:
            body = " ".join(response.text.split())[:160]
            raise HttpStatusError(
                f"{self.description} answered HTTP {response.status_code} on {path}: {body}", "check the URL in --source and the server's logs"
            )
        return response

    @abstractmethod
    def get(self, trace_id: str) -> Trace: ...

    def traces(self, trace_ids: list[str]) -> Iterator[Trace]:
        """The traces ``trace_ids``, in that order: one :meth:`get` each here; a server that can read
        many traces in one request (ClickHouse) reads them in batches."""
        for trace_id in trace_ids:
            yield self.get(trace_id)

    @abstractmethod
    def latest(self) -> str: ...

    @abstractmethod
    def search(self, limit: int, query: str | None, lookback: str | None) -> list[str]: ...

    def search_all(self, limit: int | None, query: str | None = None, lookback: str | None = "1h") -> SearchResult:
        """Every matching trace (up to ``limit``), most recent first, and whether the server cut the answer.

        This default is one search of ``page_size`` traces, capped when it comes back full; Jaeger and
        Tempo page through time windows instead."""
        want = self.page_size if limit is None else limit
        ids = self.search(want, query, lookback)
        return SearchResult(ids, capped=limit is None and len(ids) >= want, requests=1)

    @gc_paused()
    def json_body(self, response: httpx.Response, where: str) -> Any:
        """The body as JSON: one document, or the list of documents of a streamed answer (one per line)."""
        text = response.text
        try:
            return json.loads(text)
        except RecursionError:
            raise too_deep(where) from None
        except ValueError:
            # streamed gRPC-gateway answers are several JSON objects, one per line
            docs = [loads(line, where) for line in text.splitlines() if line.strip()]
            if not docs:
                raise MalformedInput(f"{where} returned an empty body", "check the server version") from None
            return docs

    @gc_paused()
    def trace_from(self, body: Any, trace_id: str, where: str) -> Trace | None:
        """The trace ``trace_id`` in a decoded body (any shape :func:`spans_from_document` reads), if there."""
        docs = body if isinstance(body, list) else [body]
        spans: list[Span] = []
        info: dict[str, Any] = {}
        for doc in docs:
            got, got_info = spans_from_document(doc, where, trace_id)
            spans.extend(got)
            info.update(got_info)
        traces = group_traces(spans, self.description, info)
        return traces.get(trace_id)

    def close(self) -> None:
        self.client.close()
