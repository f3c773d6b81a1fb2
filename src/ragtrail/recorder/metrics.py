"""Metrics counted before any sampling (docs/semconv.md §9): every stage call, sampled in or out.

Traces are a sample; a rate read from them is only as good as the weights they carry. These
counters are not sampled: the recorder adds to them at the end of every stage through the global
MeterProvider (``opentelemetry.metrics``, the API only), so "how often does the reranker degrade"
has an exact answer whatever the traces' sampling. With no MeterProvider set up (the API's proxy,
or a no-op one) a stage does nothing here beyond one provider lookup.

A sampled-out stage does no adapting and no hashing, so it counts only what is cheap: its kind and
component, its status (from the exception it ended with and ``Stage.set_status``), the length of
the input and output lists it was handed when they are sized, and one exclusion per
``Stage.exclude`` call by reason. A recording stage counts the same things from its conclusion, and
its exclusions the same way (one per ``exclude`` call), so the counts mean the same sampled in and out.

Low cardinality only: attributes are the stage's kind, component (a class-level name), status,
failure class and an exclusion's reason code; no id, no query text.

The GenAI mirror's retrieval duration (``gen_ai.client.operation.duration``, docs/semconv.md §6) is
one more histogram here, recorded once per outermost retrieve stage, sampled in or out.
"""

from __future__ import annotations

import contextvars
import threading
import time
import weakref
from collections.abc import Sized
from typing import Any, NamedTuple

from opentelemetry import metrics as otel_metrics

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.recorder.conclude import RETRIEVAL_KINDS, is_cancellation, settle_status
from ragtrail.recorder.errors import record_internal_error
from ragtrail.recorder.record import StageRecord

__all__ = [
    "BUCKETS",
    "UNKNOWN",
    "METER_NAME",
    "PIPELINE_RUNS",
    "STAGE_CANDIDATES_IN",
    "STAGE_CANDIDATES_OUT",
    "STAGE_EXCLUSIONS",
    "STAGE_RUNS",
    "Instruments",
    "Totals",
    "RunTally",
    "StageTally",
    "close_tally",
    "instruments",
    "note_refused",
    "open_tally",
    "refresh",
    "sized_count",
]

METER_NAME = "ragtrail"
STAGE_RUNS = "ragtrail.stage.runs"
STAGE_EXCLUSIONS = "ragtrail.stage.exclusions"
STAGE_CANDIDATES_IN = "ragtrail.stage.candidates.in"
STAGE_CANDIDATES_OUT = "ragtrail.stage.candidates.out"
PIPELINE_RUNS = "ragtrail.pipeline.runs"
# candidates per stage: a handful to a thousand (the SDK's default buckets are for milliseconds)
BUCKETS = (0.0, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)


class Totals:
    """A cumulative count per attribute set, kept here and read by an observable counter when the
    SDK collects: a stage adds to a dict under a lock (well under a microsecond) instead of paying the
    SDK's per-measurement work (attribute validation, hashing, the exemplar filter: several µs each)."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names  # the attribute each position of a key names (a ``None`` value: absent)
        self._lock = threading.Lock()
        self._counts: dict[tuple[Any, ...], int] = {}

    def add(self, key: tuple[Any, ...], n: int = 1) -> None:
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + n

    def observe(self, options: otel_metrics.CallbackOptions) -> list[otel_metrics.Observation]:
        """The observable counter's callback: every count so far, with its attributes."""
        with self._lock:
            counts = list(self._counts.items())
        names = self.names
        return [otel_metrics.Observation(n, {name: v for name, v in zip(names, key, strict=True) if v is not None}) for key, n in counts]


_STAGE_KEY = (sc.STAGE_KIND, sc.STAGE_COMPONENT, sc.STAGE_STATUS, sc.STAGE_FAILURE_CLASS)


class Instruments(NamedTuple):
    """The instruments, made once per MeterProvider (the counters' totals start at zero with it)."""

    runs: Totals
    exclusions: Totals
    count_in: otel_metrics.Histogram
    count_out: otel_metrics.Histogram
    pipeline_runs: Totals
    retrieval_duration: otel_metrics.Histogram  # gen_ai.client.operation.duration (the GenAI mirror's retrievals)


_provider: object | None = None  # the provider the instruments below came from
_instruments: Instruments | None = None
# while no MeterProvider is set up, when to look again (monotonic ns): the API's lookup costs ~1 µs
# then (it reads the environment each time), more than the rest of a sampled-out stage's metrics
_RECHECK_NS = 1_000_000_000
_next_check = 0


def _is_noop(provider: object) -> bool:
    """No MeterProvider set up: the API's proxy (none set yet: the lookup is repeated per stage, and a
    provider set later is picked up then) or an explicit no-op one. The proxy's class is private to
    the API, hence its name, not the class, is compared."""
    return isinstance(provider, otel_metrics.NoOpMeterProvider) or type(provider).__name__ == "_ProxyMeterProvider"


def _create(provider: otel_metrics.MeterProvider) -> Instruments | None:
    if _is_noop(provider):
        return None
    meter = provider.get_meter(METER_NAME)
    candidates = "{candidate}"
    runs, exclusions = Totals(_STAGE_KEY), Totals((*_STAGE_KEY, sc.EXCLUSION_REASON))
    pipeline_runs = Totals((sc.STAGE_COMPONENT, sc.RUN_STATUS, sc.ANSWER_REFUSED))
    meter.create_observable_counter(STAGE_RUNS, [runs.observe], unit="{stage}", description="Stage calls, sampled in or out")
    meter.create_observable_counter(STAGE_EXCLUSIONS, [exclusions.observe], unit=candidates, description="Stage.exclude calls, by reason")
    meter.create_observable_counter(PIPELINE_RUNS, [pipeline_runs.observe], unit="{run}", description="Pipeline runs, sampled in or out")
    return Instruments(
        runs,
        exclusions,
        meter.create_histogram(
            STAGE_CANDIDATES_IN, unit=candidates, description="Candidates that entered a stage", explicit_bucket_boundaries_advisory=BUCKETS
        ),
        meter.create_histogram(
            STAGE_CANDIDATES_OUT, unit=candidates, description="Candidates a stage handed on", explicit_bucket_boundaries_advisory=BUCKETS
        ),
        pipeline_runs,
        meter.create_histogram(
            sc.GEN_AI_CLIENT_OPERATION_DURATION,
            unit="s",
            description="GenAI operation duration.",
            explicit_bucket_boundaries_advisory=sc.GEN_AI_DURATION_BUCKETS,
        ),
    )


_made: weakref.WeakKeyDictionary[Any, Instruments | None] = weakref.WeakKeyDictionary()


def _made_for(provider: otel_metrics.MeterProvider) -> Instruments | None:
    """The instruments made for ``provider``, made once: a provider set again (tests swap them) keeps
    its counters and registers no second set of observable counters."""
    try:
        return _made[provider]
    except KeyError:
        made = _made[provider] = _create(provider)
        return made
    except TypeError:  # a provider that takes no weak reference
        return _create(provider)


def instruments() -> Instruments | None:
    """The instruments of the global MeterProvider, re-made when it changes; ``None`` when none is
    set up (then looked up again at most once a second: a provider set after the first stages ran
    counts from then on, within a second; :func:`refresh` looks at once)."""
    global _provider, _instruments, _next_check
    if _instruments is None and _provider is not None:
        now = time.monotonic_ns()
        if now < _next_check:
            return None
        _next_check = now + _RECHECK_NS
    provider = otel_metrics.get_meter_provider()
    if provider is not _provider:
        # tried once per provider (one that fails to make them is counted once, then left alone);
        # a race makes them twice: the SDK hands back the instrument it already has
        _provider, _instruments = provider, None
        _instruments = _made_for(provider)
    return _instruments


def refresh() -> None:
    """Look up the global MeterProvider at the next stage (after setting one when stages already ran)."""
    global _next_check
    _next_check = 0


# the status of a sampled-out stage whose outcome was not handed over, and of a run that had one (a
# metrics-only label: a recorded stage always knows its status)
UNKNOWN = "unknown"


class RunTally:
    """What a pipeline run's stages ended with, known without recording (a sampled-out run's status)."""

    __slots__ = ("outer", "refused", "retrieved", "statuses")

    def __init__(self, outer: RunTally | None) -> None:
        self.outer = outer
        self.statuses: set[str] = set()
        self.retrieved: bool | None = False  # None: a retrieval stage's outputs were not handed over
        self.refused: bool | None = None

    def add(self, status: str, retrieved: bool | None) -> None:
        """A stage of the run ended (and of every run around it, as ``PipelineState.add_stage_status``);
        ``retrieved`` is None when it is not known whether it handed on anything."""
        tally: RunTally | None = self
        while tally is not None:
            tally.statuses.add(status)
            if retrieved:
                tally.retrieved = True
            elif retrieved is None and tally.retrieved is False:
                tally.retrieved = None
            tally = tally.outer

    def status(self, exc: BaseException | None) -> str:
        """The rule of ``PipelineState.run_status`` on what a sampled-out run knows; where a stage's
        outcome was not handed over (a library stage sampled out), what it would decide is ``unknown``."""
        if is_cancellation(exc):
            return sc.RUN_CANCELLED
        if exc is not None or sc.STATUS_FAILED in self.statuses:
            return sc.RUN_FAILED
        if sc.STATUS_DEGRADED in self.statuses:
            return sc.RUN_DEGRADED
        if UNKNOWN in self.statuses or self.retrieved is None:
            return UNKNOWN
        return sc.RUN_AVAILABLE if self.retrieved else sc.RUN_EMPTY


_current_run: contextvars.ContextVar[RunTally | None] = contextvars.ContextVar("ragtrail_metrics_run", default=None)


class StageTally:
    """What one stage tells the metrics, filled as cheaply when it is sampled out as when it records."""

    __slots__ = ("component", "count_out", "failure_class", "kind", "reasons", "run", "started", "status", "token", "tools")

    def __init__(self, tools: Instruments, kind: str, component: str, run: RunTally | None) -> None:
        self.tools = tools
        self.kind = kind
        self.component = component
        self.run = run
        self.token: contextvars.Token[RunTally | None] | None = None
        self.status: str | None = None
        self.failure_class: str | None = None
        self.count_out: int | None = None
        self.reasons: list[Any] = []  # one per Stage.exclude call, as given (checked once per code at the end)
        self.started: float | None = None  # perf_counter at the start of a retrieval the GenAI mirror claims

    def said_status(self, status: str, failure_class: str | None) -> None:
        """``Stage.set_status`` on a sampled-out stage (an invalid status is ignored, as recorded)."""
        if status in sc.STATUSES:
            self.status = status
            if failure_class is not None:
                self.failure_class = failure_class


def _valid_reason(reason: Any) -> str:
    """A reason code as the recorder writes it: an invalid one is ``custom:invalid``."""
    return reason if isinstance(reason, str) and sc.is_valid_reason(reason) else sc.REASON_CUSTOM_PREFIX + "invalid"


def sized_count(candidates: Any) -> int | None:
    """How many candidates a list holds, without iterating it (``None``: not a sized list)."""
    if type(candidates) in (list, tuple):  # the common case, without the ABC check below
        return len(candidates)
    if candidates is None or isinstance(candidates, (str, bytes, dict)) or not isinstance(candidates, Sized):
        return None
    try:
        return len(candidates)
    except Exception as exc:  # a broken __len__
        record_internal_error("metrics", exc)
        return None


def open_tally(kind: str, component: str, outermost_retrieval: bool = False) -> StageTally | None:
    """The tally of a stage that starts; ``None`` when no MeterProvider is set up. A pipeline stage
    opens a run tally for the stages inside it; the outermost retrieve stage (no retrieve stage open
    around it) starts its GenAI duration when the GenAI mirror is on. Never raises (an error is counted)."""
    if _instruments is None and _provider is not None and time.monotonic_ns() < _next_check:
        return None  # no MeterProvider, looked up less than a second ago: the common case, inlined
    try:
        tools = instruments()
        if tools is None:
            return None
        run = _current_run.get()
        tally = StageTally(tools, kind, component, run)
        if kind == sc.KIND_PIPELINE:
            tally.run = RunTally(run)
            tally.token = _current_run.set(tally.run)
        elif outermost_retrieval and settings.get().mirror_genai:
            tally.started = time.perf_counter()
        return tally
    except Exception as exc:
        record_internal_error("metrics", exc)
        return None


def note_refused(refused: bool) -> None:
    """``ragtrail.answer(refused=...)`` in the run open here (sampled in or out)."""
    run = _current_run.get()
    if run is not None:
        run.refused = bool(refused)


def close_tally(tally: StageTally | None, record: StageRecord | None, exc: BaseException | None, span: Any = None) -> None:
    """Count a stage that ended (``None``: no MeterProvider, nothing to count): from its conclusion
    when it recorded (``record``), else from the tally; ``span``: the stage's ended span (its duration
    is the GenAI duration's, when it has one). Never raises (an error, a failing instrument included,
    is counted as an internal error)."""
    if tally is None:
        return
    try:
        _count(tally, record, exc, span)
    except Exception as error:
        record_internal_error("metrics", error)
    finally:
        if tally.token is not None:
            try:  # noqa: SIM105 - every pipeline stage: no suppress() object
                _current_run.reset(tally.token)
            except ValueError:
                pass  # ended in another context


def _count(tally: StageTally, record: StageRecord | None, exc: BaseException | None, span: Any) -> None:
    conclusion = record.conclusion if record is not None else None
    kind = tally.kind
    count_in: int | None = None
    count_out = tally.count_out
    if record is not None and conclusion is not None:
        status, failure_class = conclusion.status, conclusion.failure_class
        count_in = None if conclusion.inputs_unrecorded else conclusion.count_in
        count_out = len(record.outputs) if record.outputs is not None else None
        run_status: Any = conclusion.run.get(sc.RUN_STATUS)
        refused: Any = conclusion.run.get(sc.ANSWER_REFUSED)
    elif tally.status is None and exc is None and count_out is None and kind != sc.KIND_PIPELINE:
        status, failure_class = UNKNOWN, None  # outputs not handed over: ok, empty or degraded is not known
        run_status = refused = None
    else:
        empty = count_out == 0 and kind != sc.KIND_PIPELINE
        status, failure_class = settle_status(tally.status, tally.failure_class, exc, empty)
        run_status = tally.run.status(exc) if kind == sc.KIND_PIPELINE and tally.run is not None else None
        refused = tally.run.refused if tally.run is not None else None
    key = (kind, tally.component, status, failure_class or None)
    tools = tally.tools
    if tally.started is not None:
        _record_duration(tally, span, status, failure_class, exc)
    tools.runs.add(key)
    reasons = tally.reasons
    if reasons:
        # distinct codes, then each one's count, both at C speed (a Counter costs ~2 µs for ten)
        for reason in dict.fromkeys(reasons):
            tools.exclusions.add((*key, _valid_reason(reason)), reasons.count(reason))
    if kind != sc.KIND_PIPELINE:
        if tally.run is not None:
            tally.run.add(status, (None if count_out is None else count_out != 0) if kind in RETRIEVAL_KINDS else False)
    elif run_status is not None:
        tools.pipeline_runs.add((tally.component, run_status, None if refused is None else bool(refused)))
    if conclusion is not None:  # the histograms: recording stages only (see the module docstring)
        attributes = {name: v for name, v in zip(_STAGE_KEY, key, strict=True) if v is not None}
        if count_in is not None:
            tools.count_in.record(count_in, attributes)
        if count_out is not None:
            tools.count_out.record(count_out, attributes)


def _record_duration(tally: StageTally, span: Any, status: str, failure_class: str | None, exc: BaseException | None) -> None:
    """One ``gen_ai.client.operation.duration`` measurement for a retrieval the GenAI mirror claims,
    sampled in or out: the span's duration when it recorded one (a batch's sibling stages are
    backdated to the call's start), else the time since the stage started. ``error.type`` only when
    it failed: the exception's class name, else the failure class the stage was given (``_OTHER``
    when none); a cancelled or degraded retrieval ended in no error."""
    start, end = getattr(span, "start_time", None), getattr(span, "end_time", None)
    seconds = (end - start) / 1e9 if isinstance(start, int) and isinstance(end, int) else time.perf_counter() - (tally.started or 0.0)
    attributes = {sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OPERATION_RETRIEVAL}
    if status == sc.STATUS_FAILED:
        if exc is not None:
            attributes[sc.ERROR_TYPE] = type(exc).__qualname__
        else:
            attributes[sc.ERROR_TYPE] = failure_class if failure_class and failure_class != "unspecified" else sc.ERROR_TYPE_OTHER
    tally.tools.retrieval_duration.record(max(seconds, 0.0), attributes)
