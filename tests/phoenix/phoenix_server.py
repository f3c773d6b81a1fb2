"""Run the REAL Arize Phoenix server for ragtrail's `phoenix` tests, send it spans, read them back.

Phoenix lives in its own venv in a cache outside the repo (``scripts/install-phoenix.sh``:
``$RAGTRAIL_PHOENIX_DIR`` or ``~/.cache/ragtrail-phoenix``). ``phoenix serve`` is started on
127.0.0.1 with a temporary working directory (SQLite, nothing kept) and stopped by the tests. Its
OTLP/gRPC receiver binds [::] whatever PHOENIX_HOST says, so it gets a free port of its own.
Missing Phoenix: a failure under CI, a loud skip elsewhere.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))
import ragtrail_backends as rb  # noqa: E402  (the Jaeger tier's process management)
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import SpanLimits, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402

INSTALL_SCRIPT = rb.REPO / "scripts" / "install-phoenix.sh"
PHOENIX_ENV = "RAGTRAIL_PHOENIX_DIR"
PROJECT_ATTRIBUTE = "openinference.project.name"  # the resource attribute Phoenix files a trace under


def phoenix_dir() -> Path:
    env = os.environ.get(PHOENIX_ENV)
    return Path(env) if env else Path.home() / ".cache" / "ragtrail-phoenix"


def phoenix_binary() -> Path:
    return phoenix_dir() / "venv" / "bin" / "phoenix"


def missing_message() -> str:
    return (
        "\n" + "!" * 78 + "\nragtrail phoenix: the real Phoenix server is not installed:\n"
        f"    {phoenix_binary()}\n  Install it (~5 min, ~850 MB, cached outside the repo): "
        f"{INSTALL_SCRIPT.relative_to(rb.REPO)}\n  or point {PHOENIX_ENV} at a directory holding venv/bin/phoenix.\n" + "!" * 78
    )


def require_phoenix() -> Path:
    binary = phoenix_binary()
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        if os.environ.get("CI"):
            pytest.fail("required under CI:" + missing_message(), pytrace=False)
        pytest.skip("SKIPPED, not passed:" + missing_message())
    return binary


class Phoenix(rb.ManagedProcess):
    """``phoenix serve`` on 127.0.0.1 (HTTP: UI, REST API, OTLP/HTTP) with a throwaway working dir."""

    def __init__(self, binary: Path, work_dir: Path, name: str = "phoenix") -> None:
        self.http_port, self.grpc_port = rb.free_port(), rb.free_port()
        env = {
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.http_port),
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            "PHOENIX_WORKING_DIR": str(work_dir / "phoenix-working-dir"),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        super().__init__(name, [str(binary), "serve"], env, [self.http_port, self.grpc_port], work_dir)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def source(self) -> str:
        """What ``ragtrail show|verify --source`` takes for this Phoenix."""
        return f"phoenix+{self.url}"

    def get(self, path: str, **params: Any) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - loopback only
            return json.loads(resp.read())

    def spans(self, project: str, trace_id: str) -> list[dict[str, Any]]:
        """Every span of a trace as Phoenix's REST API returns it ([] while not ingested yet)."""
        try:
            body = self.get(f"/v1/projects/{urllib.parse.quote(project)}/spans", trace_id=trace_id, limit=1000)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:  # the project appears with its first span
                return []
            raise
        return list(body.get("data") or [])

    def wait_for_spans(self, project: str, trace_id: str, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        return rb.wait_until(
            lambda: (lambda s: s if len(s) >= count else None)(self.spans(project, trace_id)),
            timeout,
            interval=0.3,
            what=f"{count} spans of trace {trace_id} in Phoenix",
        )


@contextmanager
def sending(phoenix: Phoenix, project: str, limits: SpanLimits | None = None) -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    """An SDK TracerProvider exporting OTLP/HTTP to Phoenix under ``project`` (and to memory, so a
    test can compare what Phoenix shows with what was sent)."""
    resource = Resource.create({"service.name": f"ragtrail-{project}", PROJECT_ATTRIBUTE: project})
    provider = TracerProvider(resource=resource, span_limits=limits) if limits else TracerProvider(resource=resource)
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix.url}/v1/traces")))
    try:
        yield provider, memory
    finally:
        provider.shutdown()


def trace_id_of(memory: InMemorySpanExporter) -> str:
    ids = {format(s.context.trace_id, "032x") for s in memory.get_finished_spans()}
    assert len(ids) == 1, ids
    return ids.pop()


# --- reading Phoenix's spans -------------------------------------------------------------------------
def by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


def one(spans: list[dict[str, Any]], name: str) -> dict[str, Any]:
    found = by_name(spans, name)
    assert len(found) == 1, (name, [s["name"] for s in spans])
    return found[0]


def documents(attributes: dict[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The documents Phoenix holds under ``prefix`` (``retrieval.documents``...), as the cards it
    draws: ``{"id", "score", "content", "metadata"}`` (missing keys absent). Phoenix returns nested
    attributes flattened with dots, metadata JSON parsed into sub-keys."""
    docs: dict[int, dict[str, Any]] = {}
    head = prefix + "."
    for key, value in attributes.items():
        if not key.startswith(head):
            continue
        index, _, rest = key[len(head) :].partition(".")
        assert rest.startswith("document."), key
        field = rest[len("document.") :]
        doc = docs.setdefault(int(index), {})
        if field.startswith("metadata."):
            doc.setdefault("metadata", {})[field[len("metadata.") :]] = value
        elif field == "metadata" and isinstance(value, str):
            doc["metadata"] = json.loads(value)
        else:
            doc[field] = value
    assert sorted(docs) == list(range(len(docs))), (prefix, sorted(docs))
    return [docs[i] for i in range(len(docs))]


def sent_cards(attributes: Any, prefix: str) -> list[dict[str, Any]]:
    """The cards a sent SDK span's mirror attributes describe, in the shape of :func:`documents`."""
    flat = {}
    for key, value in dict(attributes).items():
        if key.startswith(prefix + ".") and key.endswith(".document.metadata"):
            for k, v in json.loads(value).items():
                flat[f"{key}.{k}"] = v
        elif key.startswith(prefix + "."):
            flat[key] = value
    return documents(flat, prefix)
