"""Get one trace per case: run the user's pipeline in-process under ragtrail, or read recorded traces.

In-process (``--pipeline pkg.module:function``): the real OpenTelemetry SDK with ragtrail's export
path (the ragtrail sampler at probability 1.0, the whole-trace processor) writing to memory, and the
installed ragtrail instrumentations switched on as ``opentelemetry-instrument`` would. Each case's
query is passed to the function; the spans that finished during that call are its trace (pairing by
run order, nothing else runs the pipeline meanwhile). The spans then take the wire's shape (OTLP
JSON, as the local store writes it) and are read back by the inspector's own reader, manifest and
verify, so the gate judges exactly what ``ragtrail show`` would show for that trace.

Recorded (``--traces SOURCE``: a local store, a file, ``jaeger+http://...``, ``tempo+http://...``, ``clickhouse+http://...``):
a case is paired with a trace only by the hop-0 query receipt (``ragtrail.query.sha256``, the
contract's receipt of the case's query): never by time or position. A case without its trace is a
``missing_query`` problem.

Whatever the path, what the gate cannot trust about a trace (failed, sampled, truncated, a receipt
alarm) becomes a named :class:`~ragtrail.gate.model.Problem`.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.inspect.errors import NoRagtrailSpans, UsageError
from ragtrail.inspect.manifest import build
from ragtrail.inspect.model import Trace
from ragtrail.inspect.search import query_receipt
from ragtrail.inspect.weight import WeightTally

from .model import EvalCase, Problem
from .observation import Observation, observe

Progress = Callable[[int, int], None]

# fidelity alarms that say "part of the trace did not arrive" rather than "a receipt does not match"
_TRUNCATION_FIELDS = frozenset(
    {
        "droppedEventsCount",
        "droppedAttributesCount",
        "event.droppedAttributesCount",
        "status",
        sc.TRACE_SPAN_COUNT,
        sc.TRACE_SEGMENT_ROOT,
        sc.TRACE_SEGMENT_SPAN_COUNT,
        sc.EVENTS_SPANS,
        sc.STAGE_CONTINUATION,
        sc.STAGE_INSTRUMENTATION_ERRORS,
    }
)
_TRUNCATION_PROBLEMS = frozenset({"missing events in continuation", "event count mismatch", "missing spans"})
# the readers' notes that say a trace arrived in pieces (split, duplicated) or with lines lost
_TRUNCATION_NOTES = ("a later part of a trace", "duplicate spans")


@dataclass(slots=True)
class CaseRun:
    """One case and what the gate could read of its trace."""

    case: EvalCase
    trace_id: str | None = None
    observation: Observation | None = None
    problems: list[Problem] = field(default_factory=list)
    error: str | None = None
    weight: float = 1.0  # the requests the trace stands for (ragtrail.inspect.weight: head x tail)
    basis: str = "no_record"
    tail_stamped: bool = False
    degraded: bool = False  # run status degraded or failed


# --- judging one trace -----------------------------------------------------------------------------
def _resource(trace: Trace) -> dict[str, Any]:
    if not trace.spans:
        return {}
    root = min(trace.spans, key=lambda s: (s.parent_span_id is not None, s.start_ns))
    return dict(root.resource)


def examine(case: EvalCase, trace: Trace, key: bytes | None = None) -> CaseRun:
    """The observation of ``trace`` for ``case`` and every reason not to trust it."""
    run = CaseRun(case=case, trace_id=trace.trace_id)

    def problem(kind: str, detail: str) -> None:
        run.problems.append(Problem(kind=kind, case_id=case.id, detail=detail, trace_id=trace.trace_id))

    try:
        manifest = build(trace, key)
    except NoRagtrailSpans:
        problem("sampled_out", f"trace {trace.trace_id} has {len(trace.spans)} spans but no ragtrail stage span")
        return run
    fidelity = manifest.fidelity
    truncation = [a for a in fidelity.alarms if a.field in _TRUNCATION_FIELDS or a.problem in _TRUNCATION_PROBLEMS]
    receipts = [a for a in fidelity.alarms if a not in truncation]
    if truncation or fidelity.partial or trace.partial:
        first = truncation[0] if truncation else None
        what = (
            f"{first.problem} at {first.stage or first.field}" + (f" ({first.detail})" if first.detail else "")
            if first
            else trace.partial_message or "the backend returned a partial trace"
        )
        problem("truncated", f"{len(truncation) or 1} completeness alarm(s): {what}")
    notes = [n for n in trace.notes if n.startswith(_TRUNCATION_NOTES) or "unreadable lines" in n]
    if notes and not truncation:
        problem("truncated", f"the reader says: {notes[0]}")
    if receipts:
        a = receipts[0]
        problem("receipt_alarm", f"{len(receipts)} receipt alarm(s): {a.problem} at {a.stage or '-'} {a.candidate or ''} {a.field}".rstrip())
    sampling = manifest.sampling  # the weight is head x tail (ragtrail.inspect.weight): a tail-sampled trace is a sample too
    run.weight, run.basis, run.tail_stamped = sampling.weight, sampling.basis, sampling.tail_policy is not None
    run.degraded = manifest.run_status in (sc.RUN_DEGRADED, sc.RUN_FAILED)
    if sampling.weight > 1 or sampling.basis == "unknown_policy":
        problem("sampled_out", f"{sampling.statement}, the others of the set may be missing")
    failed = [s.label for s in manifest.stages if s.status == sc.STATUS_FAILED]
    if manifest.run_status == sc.RUN_FAILED or failed:
        problem("failed_trace", "run status failed" if not failed else f"stage {failed[0]} failed")
    run.observation = observe(manifest, case.relevant, _resource(trace))
    return run


# --- in-process runs -------------------------------------------------------------------------------
def load_pipeline(spec: str) -> Callable[..., Any]:
    """``pkg.module:function`` (``pkg.module:obj.method`` too), importable from the current directory."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--pipeline wants pkg.module:function, got {spec!r}", "e.g. --pipeline my_app.rag:answer")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"cannot import {module_name!r}: {exc}", "run from the directory your package imports from") from None
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise UsageError(f"{module_name} has no attribute {attr!r}", "check the function's name") from None
    if not callable(target):
        raise UsageError(f"{spec} is a {type(target).__name__}, not a function", "name a function taking the query")
    fn: Callable[..., Any] = target
    return fn


class _Collector:
    """An in-memory span exporter: spans go to the open run's list, or nowhere between runs."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active: list[Any] | None = None

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with self.lock:
            if self.active is not None:
                self.active.extend(spans)
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True

    def shutdown(self) -> None:
        return None


@dataclass
class _Recording:
    collector: _Collector
    flush: Callable[[], Any]  # exports every finished segment now (the whole-trace processor's force_flush)
    always_on: bool


_RECORDING: _Recording | None = None
_RECORDING_LOCK = threading.Lock()


def _recording() -> _Recording:
    """The process's gate recording: installed once (OpenTelemetry allows one global provider).

    With no provider set, ragtrail's own (``ragtrail.configure``: sampler at 1.0, whole-trace
    processor) becomes the global one. With an SDK provider already set (the host set one up at
    import), a whole-trace processor to memory is added to it and its sampler is kept: a case
    that then leaves no trace is said to be sampled out, not guessed at."""
    global _RECORDING
    with _RECORDING_LOCK:
        if _RECORDING is not None:
            return _RECORDING
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.trace import ProxyTracerProvider

        from ragtrail.export.configurator import configure
        from ragtrail.export.whole_trace import WholeTraceSpanProcessor

        collector = _Collector()
        options = {"schedule_delay_millis": 50, "grace_millis": 1}
        current = otel_trace.get_tracer_provider()
        if isinstance(current, ProxyTracerProvider):
            provider = configure(
                exporter=collector,  # type: ignore[arg-type]
                sampling_probability=1.0,
                set_global=True,
                service_name=os.environ.get("OTEL_SERVICE_NAME") or "ragtrail-gate",
                processor_options=options,
            )
            flush: Callable[[], Any] = provider.force_flush
            always_on = True
        elif isinstance(current, TracerProvider):
            processor = WholeTraceSpanProcessor(collector, **options)  # type: ignore[arg-type]
            current.add_span_processor(processor)
            flush = processor.force_flush
            description = current.sampler.get_description()
            always_on = "AlwaysOnSampler" in description or description in ("RagtrailSampler{1}", "RagtrailSampler{1.0}")
        else:
            raise UsageError(
                f"the global tracer provider is a {type(current).__name__}, not the OpenTelemetry SDK's",
                "let ragtrail set the provider up, or use --traces with recorded traces",
            )
        _RECORDING = _Recording(collector, flush, always_on)
        return _RECORDING


def _instrument() -> list[Any]:
    """Switch on the installed ragtrail instrumentations not already on; returns those to switch off."""
    from importlib.metadata import entry_points

    switched = []
    for ep in entry_points(group="opentelemetry_instrumentor"):
        if not ep.name.startswith("ragtrail_"):
            continue
        try:
            instrumentor = ep.load()()
            if instrumentor.is_instrumented_by_opentelemetry:
                continue
            # a library not installed (or too old) is skipped quietly, as opentelemetry-instrument does,
            # by the instrumentor's own check (faiss accepts any of several wheels); instrument() would
            # log an error line per library per run
            if instrumentor._check_dependency_conflicts() is not None:
                continue
            instrumentor.instrument()
            if instrumentor.is_instrumented_by_opentelemetry:
                switched.append(instrumentor)
        except Exception:  # noqa: BLE001 - a library that is not installed, or too old: not instrumented
            continue
    return switched


def _call(fn: Callable[..., Any], query: str) -> Any:
    if inspect.iscoroutinefunction(fn):
        return asyncio.run(fn(query))
    result = fn(query)
    if inspect.isawaitable(result):

        async def wait() -> Any:
            return await result

        return asyncio.run(wait())
    return result


def _spans_to_traces(spans: list[Any], where: str) -> list[Trace]:
    """Finished SDK spans in the wire's shape (OTLP JSON), read back by the inspector's reader."""
    if not spans:
        return []
    from ragtrail.export.otlp_json import spans_to_dict
    from ragtrail.inspect.sources import group_traces, spans_from_document

    decoded, info = spans_from_document(spans_to_dict(spans), where)
    return list(group_traces(decoded, where, info).values())


def _query_receipts(query: str, key: bytes | None) -> set[str]:
    """What a producer may have stamped as this query's receipt: its sha256 (text mode, or no key) and,
    with the receipt key, its keyed receipt (``hash`` mode under ``RAGTRAIL_RECEIPT_KEY``)."""
    return {receipt(query).sha256} | ({query_receipt(query, key)} if key is not None else set())


def _pick(case: EvalCase, traces: list[Trace], key: bytes | None = None) -> Trace | None:
    """The case's trace among those its call produced: the one with ragtrail spans (one call, one
    pipeline); with several, the one whose hop-0 receipt is the case's query."""
    ours = [t for t in traces if any(sc.STAGE_KIND in s.attributes for s in t.spans)]
    if len(ours) <= 1:
        return ours[0] if ours else (traces[0] if traces else None)
    wanted = _query_receipts(case.query, key)
    matching = [t for t in ours if any(s.attributes.get(sc.QUERY_SHA256) in wanted and s.attributes.get(sc.QUERY_HOP) == 0 for s in t.spans)]
    return matching[0] if len(matching) == 1 else None


def _untraced(case: EvalCase, traces: int, always_on: bool) -> CaseRun:
    """A call whose trace cannot be told: several candidates, none recorded, or sampled out."""
    if traces > 1:
        why = Problem("missing_query", case.id, f"the call made {traces} ragtrail traces and none (or several) has this query's receipt at hop 0")
    elif always_on:
        why = Problem("missing_query", case.id, "the call recorded no trace: is the function (or the library it calls) instrumented by ragtrail?")
    else:
        why = Problem("sampled_out", case.id, "the call recorded no trace and the host's sampler does not keep every trace")
    return CaseRun(case=case, problems=[why])


def run_in_process(
    fn: Callable[..., Any], cases: Iterable[EvalCase], *, key: bytes | None = None, progress: Progress | None = None, instrument: bool = True
) -> list[CaseRun]:
    """Call ``fn(query)`` once per case under ragtrail and judge each call's trace."""
    cases = list(cases)
    rec = _recording()
    switched = _instrument() if instrument else []
    runs: list[CaseRun] = []
    try:
        for i, case in enumerate(cases):
            with rec.collector.lock:
                rec.collector.active = []
            error: BaseException | None = None
            try:
                _call(fn, case.query)
            except Exception as exc:  # noqa: BLE001 - the pipeline's own failure is the finding
                error = exc
            rec.flush()
            with rec.collector.lock:
                spans, rec.collector.active = rec.collector.active or [], None
            traces = _spans_to_traces(spans, "in-process run")
            trace = _pick(case, traces, key)
            run = _untraced(case, len(traces), rec.always_on) if trace is None else examine(case, trace, key)
            if error is not None:
                run.error = f"{type(error).__name__}: {error}"
                # the raise is the problem; the failed run status it left on the trace says it again
                run.problems = [p for p in run.problems if p.kind != "failed_trace"]
                run.problems.insert(0, Problem("pipeline_error", case.id, run.error, run.trace_id))
            runs.append(run)
            if progress is not None:
                progress(i + 1, len(cases))
    finally:
        for instrumentor in switched:
            try:
                instrumentor.uninstrument()
            except Exception:  # noqa: BLE001, S112 - leave the host as it was, as far as possible
                continue
    return runs


# --- recorded traces -------------------------------------------------------------------------------
def from_traces(
    source: str,
    cases: Iterable[EvalCase],
    *,
    key: bytes | None = None,
    progress: Progress | None = None,
    lookback: str = "24h",
    limit: int | None = None,
    timeout: float = 10.0,
) -> list[CaseRun]:
    """Pair each case with its recorded trace by the hop-0 query receipt; judge each pair.

    A query asked more often than the set asks it keeps its most recent traces, in order (a store
    holding yesterday's run too); a case whose query has no trace is ``missing_query``."""
    return from_traces_runs(source, cases, runs=1, key=key, progress=progress, lookback=lookback, limit=limit, timeout=timeout)[0]


def from_traces_runs(
    source: str,
    cases: Iterable[EvalCase],
    *,
    runs: int,
    key: bytes | None = None,
    progress: Progress | None = None,
    lookback: str = "24h",
    limit: int | None = None,
    timeout: float = 10.0,
) -> list[list[CaseRun]]:
    """``runs`` repetitions of the set from recorded traces: each query's most recent ``runs`` traces
    (times the cases that ask it), oldest run first. Pairing is by the hop-0 query receipt only; a
    repetition that has no trace for a case gets ``missing_query`` for it."""
    from ragtrail.inspect.stream import TraceStream

    cases = list(cases)
    wanted: dict[str, list[EvalCase]] = {}
    alias: dict[str, str] = {}  # a keyed receipt -> the plain one the cases are indexed by
    for case in cases:
        sha = receipt(case.query).sha256
        wanted.setdefault(sha, []).append(case)
        alias.update(dict.fromkeys(_query_receipts(case.query, key), sha))
    need = {sha: runs * len(same) for sha, same in wanted.items()}
    found: dict[str, list[tuple[int, Trace]]] = {}
    stream = TraceStream(source, lookback=lookback, limit=limit or max(1000, 4 * runs * len(cases)), timeout=timeout, progress=progress)
    for trace in stream:
        hop0 = {
            alias.get(str(s.attributes[sc.QUERY_SHA256]), str(s.attributes[sc.QUERY_SHA256]))
            for s in trace.spans
            if s.attributes.get(sc.QUERY_HOP) == 0 and isinstance(s.attributes.get(sc.QUERY_SHA256), str)
        }
        for sha in hop0 & set(wanted):
            kept = found.setdefault(sha, [])
            kept.append((min((s.start_ns for s in trace.spans), default=0), trace))
            if len(kept) > 2 * need[sha]:  # bounded memory over a store holding many old runs
                kept.sort(key=lambda x: x[0])
                del kept[: -need[sha]]
    out: list[list[CaseRun]] = [[] for _ in range(runs)]
    for case in cases:
        sha = receipt(case.query).sha256
        same = wanted[sha]
        traces = [t for _, t in sorted(found.get(sha, []), key=lambda x: x[0])][-need[sha] :]
        padded: list[Trace | None] = [None] * (need[sha] - len(traces)) + list(traces)
        position = same.index(case)
        for r in range(runs):
            picked = padded[r * len(same) + position]
            if picked is None:
                where = f"no trace in {stream.description or source} has this query's receipt ({sha[:16]}…) at hop 0"
                missing = Problem("missing_query", case.id, where + (f" for run {r + 1} of {runs}" if runs > 1 else ""))
                out[r].append(CaseRun(case=case, problems=[missing]))
            else:
                out[r].append(examine(case, picked, key))
    return out


def sampling_warning(runs: Iterable[CaseRun]) -> str | None:
    """What the traces read stand for, weighted by head x tail, with the degraded rate of the requests
    (``None`` when every trace stands for itself): the set's metrics are of the kept traces only."""
    tally = WeightTally()
    degraded = 0.0
    for run in runs:
        if run.trace_id is not None:
            tally.add(run.weight, run.basis, run.tail_stamped)
            degraded += run.weight * run.degraded
    if not (tally.unknown_policy or tally.requests != tally.traces):
        return None
    rate = f"{degraded / tally.requests:.1%}" if tally.requests else "-"
    return f"sampled traces: {tally.statement()}; degraded runs: {degraded:g} of {tally.requests:g} requests ({rate})"


__all__ = ["CaseRun", "sampling_warning", "examine", "from_traces", "from_traces_runs", "load_pipeline", "run_in_process"]
