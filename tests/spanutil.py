"""Small helpers shared by tests: read spans and events as plain dicts, OpenInference-style."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def attrs(span: Any) -> dict[str, Any]:
    """A mutable copy of a span's attributes (tuples turned into lists) to pop expected keys from.

    A schema 2 stage receipt is checked here, against the span's own attributes and events by the
    contract's rule, and then left out (every test that pops attributes would otherwise repeat its
    value, a digest); so are the export side's segment stamps, after checking their form (they are
    tested in tests/test_contract_v2.py)."""
    return checked({k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()}, span)


def own(span: Any) -> dict[str, Any]:
    """A mutable copy of a span's attributes exactly as the SDK holds them (tuples stay tuples),
    the stage receipt and segment stamps checked and left out as by :func:`attrs`."""
    return checked(dict(span.attributes or {}), span)


def checked(out: dict[str, Any], span: Any) -> dict[str, Any]:
    """``out`` (a copy of ``span``'s attributes) with the stage receipt checked and removed, and the
    export's segment stamps checked for form and removed."""
    import re

    from ragtrail.contract import semconv as sc
    from ragtrail.contract.receipts import stage_fields, stage_receipt

    if sc.STAGE_RECEIPT in out and not out.get(sc.STAGE_CONTINUATION):
        stamp = stage_receipt(stage_fields(span.attributes, [(e.name, e.attributes) for e in span.events]))
        if ":" not in out[sc.STAGE_RECEIPT] and not out.get(sc.EVENTS_SPANS):  # events all here
            assert (out[sc.STAGE_RECEIPT], out[sc.STAGE_RECEIPT_FIELDS]) == stamp, "stage receipt does not match"
        out.pop(sc.STAGE_RECEIPT)
        out.pop(sc.STAGE_RECEIPT_FIELDS)
    for key in [k for k in out if k in sc.COLUMN_NAMES or k.startswith(sc.COLUMN_META_PREFIX)]:
        # schema 3's candidate columns: read back, exactly, by events() (the records they hold)
        out.pop(key)
    if sc.TRACE_SEGMENT_ROOT in out:
        assert re.fullmatch(r"[0-9a-f]{16}", out.pop(sc.TRACE_SEGMENT_ROOT))
        count = out.pop(sc.TRACE_SEGMENT_SPAN_COUNT)
        assert isinstance(count, int) and count > 0
    return out


# the spans this test exported (SDK spans through any InMemorySpanExporter) or read back (reader spans,
# :func:`remember`), by span id: schema 4 rows point to another span's content receipts, which the
# reader resolves within the trace and :func:`records` resolves within the test (cleared per test)
_SEEN: dict[str, Any] = {}


def _span_id(span: Any) -> str:
    context = getattr(span, "context", None)
    return format(context.span_id, "016x") if context is not None else str(span.span_id)


def remember(spans: Iterable[Any]) -> None:
    """Make ``spans`` the ones :func:`records` follows schema 4's ``content.from`` pointers to."""
    for span in spans:
        _SEEN[_span_id(span)] = span


def forget() -> None:
    _SEEN.clear()


def _install() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    export = InMemorySpanExporter.export
    if getattr(export, "_spanutil", False):
        return

    def remembering(self: Any, spans: Any) -> Any:
        remember(spans)
        return export(self, spans)

    remembering._spanutil = True  # type: ignore[attr-defined]
    InMemorySpanExporter.export = remembering  # type: ignore[method-assign]


_install()


def _content_of(span_id: str) -> dict[str, dict[str, Any]] | None:
    from ragtrail.contract import semconv as sc
    from ragtrail.inspect.columns import content_by_id

    span = _SEEN.get(span_id)
    return content_by_id(span.attributes, (span.attributes or {}).get(sc.SCHEMA, 1)) if span is not None else None


def records(span: Any, parts: Iterable[Any] = ()) -> list[tuple[str, dict[str, Any]]]:
    """A stage's records (produced queries, outputs, exclusions) as (event name, attributes) in
    emission order, by the reader's decoding: schema 3's columns on the stage span and its exclusion
    events read back into one per-candidate dict each (schema 2 names), schema 4's content pointers
    followed to the spans this test exported; ``parts``: its continuation spans, whose events follow in order."""
    from ragtrail.contract import semconv as sc
    from ragtrail.inspect.columns import expand, resolve_content

    wire = [
        (None, e.name, dict(e.attributes or {}))
        for part in [span, *parts]
        for e in part.events
        if e.name in (sc.EVENT_QUERY, sc.EVENT_CANDIDATE, sc.EVENT_EXCLUSION)
    ]
    schema = (span.attributes or {}).get(sc.SCHEMA, 1)
    if schema < sc.SCHEMA_COLUMNS:
        return [(name, a) for _, name, a in wire]
    rows = [(name, dict(a)) for _, name, a in expand(span.attributes, wire, None, schema)]
    resolve_content((a for _, a in rows), _content_of)
    return rows


def pop_pointer(record: dict[str, Any], expected: dict[str, Any]) -> None:
    """Pop a schema 4 record's ``content.from`` pointer when the expectation does not name it: it must
    name a span this test saw, and the record must hold the receipt it was resolved to (the caller
    then checks that receipt's exact values)."""
    from ragtrail.contract import semconv as sc

    if sc.CANDIDATE_CONTENT_FROM in record and sc.CANDIDATE_CONTENT_FROM not in expected:
        pointer = record.pop(sc.CANDIDATE_CONTENT_FROM)
        assert pointer in _SEEN, f"content.from {pointer!r} names no span of this test"
        assert sc.CANDIDATE_CONTENT_SHA256 in record, f"content.from {pointer!r} did not resolve"


def events(span: Any, name: str | None = None) -> list[dict[str, Any]]:
    """The stage's records (:func:`records`), of one event name when given."""
    return [a for n, a in records(span) if name is None or n == name]


def by_name(spans: Iterable[Any], name: str) -> Any:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, f"expected one span named {name!r}, got {[s.name for s in spans]}"
    return found[0]


def pop_all(mapping: dict[str, Any], expected: dict[str, Any]) -> None:
    """Pop every expected key asserting its value (``...`` accepts any value)."""
    for key, value in expected.items():
        assert key in mapping, f"missing {key}"
        actual = mapping.pop(key)
        if value is not ...:
            assert actual == value, f"{key}: {actual!r} != {value!r}"


def run_under_opentelemetry_instrument(
    script: str, tmp_path: Any, entry_point: str, *, service: str = "app", extra_env: dict[str, str] | None = None, timeout: float = 240
) -> tuple[str, list[Any]]:
    """Run ``script`` (dedented) in a real process under ``opentelemetry-instrument`` with only
    ``entry_point`` of ragtrail's instrumentors enabled, exporting through ragtrail's configurator to
    the local store. The script prints ``APP-OK`` when it finished. Returns its stdout and the
    decoded spans (the inspector's OTLP JSON reader). The environment and the store reader are the
    documentation-app runner's (tests/apps/runner.py), so both kinds of test run apps one way."""
    import sys
    import textwrap
    from pathlib import Path

    from apps.runner import BIN, instrumented_env, read_store, run_process

    tmp_path = Path(tmp_path)
    store = tmp_path / "store"
    path = tmp_path / "app.py"
    path.write_text(textwrap.dedent(script))
    env = instrumented_env(store, [entry_point], service)
    env.update(extra_env or {})
    proc = run_process([str(BIN / "opentelemetry-instrument"), sys.executable, str(path)], env, tmp_path, timeout)
    assert "APP-OK" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]
    spans = read_store(store)
    remember(spans)
    return proc.stdout, spans


def stage_spans(exporter: Any, kind: str) -> list[Any]:
    """Finished stage spans of ``kind``, continuation spans left out."""
    from ragtrail.contract import semconv as sc

    return [s for s in exporter.get_finished_spans() if s.attributes.get(sc.STAGE_KIND) == kind and not s.attributes.get(sc.STAGE_CONTINUATION)]


def stitched(span: Any, spans: Any) -> list[tuple[str, dict[str, Any]]]:
    """The stage's events followed by its continuation spans' events, in continuation order."""
    from ragtrail.contract import semconv as sc

    parts = sorted(
        (s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id and s.attributes.get(sc.STAGE_CONTINUATION)),
        key=lambda s: s.attributes[sc.STAGE_CONTINUATION_INDEX],
    )
    return records(span, parts)


def content_part(record: Any) -> str:
    """A candidate record's content in its digest item: its sha256, or ``""`` when the record points to
    another stage's receipt (schema 4's ``content.from``: the stage did not state it)."""
    from ragtrail.contract import semconv as sc

    return "" if sc.CANDIDATE_CONTENT_FROM in record else record.get(sc.CANDIDATE_CONTENT_SHA256, "")


def check_count_and_digest(span: Any, evs: list[tuple[str, dict[str, Any]]]) -> None:
    """The stage's stamped event count and digest match the (stitched) candidate events received."""
    from ragtrail.contract import semconv as sc
    from ragtrail.contract.receipts import sorted_events_digest

    items = [(name, a[sc.CANDIDATE_ID], content_part(a)) for name, a in evs]
    assert span.attributes[sc.EVENTS_COUNT] == len(evs)
    assert span.attributes[sc.EVENTS_DIGEST] == sorted_events_digest(items)


class CallSpy:
    """Replaces ``cls.name`` (monkeypatch) with a pass-through to the library's own method that keeps
    what it returned (to prove the client hands back that very object, unmodified: ``returned`` and
    deep-copied ``snapshots``), the span current inside it and when it ran (to prove the stage's span
    covers it). Works for sync and async methods; ``delay`` makes an async call slow."""

    def __init__(self, monkeypatch: Any, cls: Any, name: str, delay: float = 0.0) -> None:
        import asyncio
        import time

        from opentelemetry import trace

        self.returned: list[Any] = []
        self.snapshots: list[Any] = []
        self.current: list[Any] = []
        self.window: list[tuple[int, int]] = []
        original = getattr(cls, name)
        spy = self
        if asyncio.iscoroutinefunction(original):

            async def method(this: Any, *args: Any, **kwargs: Any) -> Any:
                start = time.time_ns()
                spy.current.append(trace.get_current_span())
                await asyncio.sleep(delay)
                result = await original(this, *args, **kwargs)
                spy.window.append((start, time.time_ns()))
                spy.keep(result)
                return result
        else:

            def method(this: Any, *args: Any, **kwargs: Any) -> Any:
                start = time.time_ns()
                spy.current.append(trace.get_current_span())
                result = original(this, *args, **kwargs)
                spy.window.append((start, time.time_ns()))
                spy.keep(result)
                return result

        monkeypatch.setattr(cls, name, method)

    def keep(self, result: Any) -> None:
        import copy

        self.returned.append(result)
        self.snapshots.append(copy.deepcopy(result))


class Record:
    """A record as ``span.events`` items look (``.name``, ``.attributes``): what tests that walked a
    stage's per-candidate events read, schema 3's columns decoded."""

    __slots__ = ("name", "attributes")

    def __init__(self, name: str, attributes: dict[str, Any]) -> None:
        self.name, self.attributes = name, attributes

    def __repr__(self) -> str:
        return f"Record({self.name!r}, {self.attributes!r})"


def rec_events(span: Any) -> list[Record]:
    """:func:`records` of one span as event-like objects."""
    return [Record(name, a) for name, a in records(span)]
