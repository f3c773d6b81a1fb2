"""Whole-trace sampling whose probability travels with the trace.

``ParentBased(TraceIdRatioBased(p))`` keeps whole traces but leaves no trace of ``p``: a reader
cannot scale counts back up, nor tell a sampled-out trace from a lost one. :class:`RagtrailSampler`
makes the same parent-based, whole-trace decision with OpenTelemetry's consistent probability
sampling (a 56-bit rejection threshold compared against randomness taken from the trace id, so
every process that sees the trace id decides alike) and makes the decision visible:

* sampled roots carry ``ragtrail.sampling.probability``, ``ragtrail.sampling.adjusted_count``
  (``1/p``), the Jaeger tags ``sampler.type=probabilistic`` / ``sampler.param=p``;
* every sampled span carries tracestate ``ot=th:<threshold>`` (W3C, OTel probability sampling),
  keeping any other tracestate member and any other ``ot`` sub-key (e.g. ``rv``).

The SDK never passes the parent's tracestate to ``should_sample`` (FACTS: opentelemetry-python
#5578), so the sampler reads it from the parent context itself and hands it back, which is what
makes children and remote children keep it.

Use in code: ``TracerProvider(sampler=RagtrailSampler(0.1))``; from the environment:
``OTEL_TRACES_SAMPLER=ragtrail OTEL_TRACES_SAMPLER_ARG=0.1`` (entry point ``sampler_factory``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, get_current_span
from opentelemetry.trace.span import TraceState
from opentelemetry.util.types import Attributes

from ragtrail.contract import semconv

#: randomness and thresholds are 56-bit values (OTel tracestate probability sampling)
MAX_THRESHOLD = 1 << 56
_RANDOM_MASK = MAX_THRESHOLD - 1
_OT_KEY = "ot"
_TH = "th"
_RV = "rv"


def probability_to_threshold(probability: float) -> int:
    """Rejection threshold ``T = 2**56 - round(p * 2**56)`` (exact: ``p * 2**56`` only shifts the float's
    exponent), as the reference implementations compute it; a trace is kept iff its randomness >= T."""
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"sampling probability must be within [0, 1], got {probability!r}")
    return MAX_THRESHOLD - round(probability * MAX_THRESHOLD)


def threshold_to_probability(threshold: int) -> float:
    """``p = (2**56 - T) / 2**56``."""
    return (MAX_THRESHOLD - threshold) / MAX_THRESHOLD


def encode_threshold(threshold: int) -> str:
    """The ``th`` value: 14 hex digits with trailing zeros removed (``0`` means keep everything)."""
    if not 0 <= threshold < MAX_THRESHOLD:
        raise ValueError("threshold must be within [0, 2**56)")
    text = f"{threshold:014x}".rstrip("0")
    return text or "0"


def decode_threshold(text: str) -> int | None:
    """Parse a ``th`` value (1-14 hex digits, right-padded with zeros); ``None`` if malformed."""
    if not 1 <= len(text) <= 14 or any(c not in "0123456789abcdef" for c in text):
        return None
    return int(text.ljust(14, "0"), 16)


def parse_ot_value(value: str) -> list[tuple[str, str]]:
    """Split the ``ot`` tracestate value into ordered ``(subkey, value)`` pairs."""
    pairs: list[tuple[str, str]] = []
    for part in value.split(";"):
        if not part:
            continue
        key, sep, sub = part.partition(":")
        if sep:
            pairs.append((key, sub))
    return pairs


def format_ot_value(pairs: Sequence[tuple[str, str]]) -> str:
    return ";".join(f"{k}:{v}" for k, v in pairs)


def randomness(trace_id: int, trace_state: TraceState | None) -> int:
    """Explicit ``ot=rv:`` randomness when present and well formed, else the trace id's low 56 bits."""
    if trace_state is not None and _OT_KEY in trace_state:
        for key, value in parse_ot_value(trace_state[_OT_KEY]):
            if key == _RV and len(value) == 14:
                try:
                    return int(value, 16)
                except ValueError:
                    break
    return trace_id & _RANDOM_MASK


def with_threshold(trace_state: TraceState, threshold: int) -> TraceState:
    """Set ``ot=th:`` keeping every other member and every other ``ot`` sub-key, in order."""
    pairs = parse_ot_value(trace_state[_OT_KEY]) if _OT_KEY in trace_state else []
    pairs = [(_TH, encode_threshold(threshold))] + [(k, v) for k, v in pairs if k != _TH]
    return trace_state.update(_OT_KEY, format_ot_value(pairs))


class RagtrailSampler(Sampler):
    """Parent-based, whole-trace, consistent probability sampler that stamps what it did.

    Roots (no valid parent) are kept iff ``randomness >= threshold``; spans with a valid parent,
    local or remote, follow the parent's sampled flag and inherit its tracestate unchanged.
    """

    def __init__(self, probability: float = 1.0) -> None:
        probability = float(probability)
        self._threshold = probability_to_threshold(probability)
        self._probability = probability
        self._on_drop: Callable[[int], None] | None = None
        # p == 0 keeps nothing; 2**56 is not encodable as ``th`` and is never stamped
        self._root_attributes: dict[str, float | str] = {}
        if probability > 0.0:
            self._root_attributes = {
                semconv.SAMPLING_PROBABILITY: probability,
                semconv.SAMPLING_ADJUSTED_COUNT: 1.0 / probability,
                semconv.JAEGER_SAMPLER_TYPE: "probabilistic",
                semconv.JAEGER_SAMPLER_PARAM: probability,
            }

    @property
    def probability(self) -> float:
        return self._probability

    @property
    def threshold(self) -> int:
        return self._threshold

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        parent = get_current_span(parent_context).get_span_context()
        parent_state = parent.trace_state if parent is not None else None
        # the SDK starts the span with the attributes the sampler returns, not the caller's:
        # hand the caller's back (and add ours on sampled roots), as the SDK's samplers do
        if parent is not None and parent.is_valid:
            if parent.trace_flags.sampled:
                return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, parent_state)
            return SamplingResult(Decision.DROP, None, parent_state)
        state = parent_state if parent_state is not None else (trace_state or TraceState())
        if self._threshold >= MAX_THRESHOLD or randomness(trace_id, state) < self._threshold:
            on_drop = self._on_drop
            if on_drop is not None:
                on_drop(trace_id)
            return SamplingResult(Decision.DROP, None, state)
        return SamplingResult(
            Decision.RECORD_AND_SAMPLE,
            {**(attributes or {}), **self._root_attributes},
            with_threshold(state, self._threshold),
        )

    def watch_drops(self, callback: Callable[[int], None] | None) -> None:
        """Have ``callback(trace_id)`` called for each root this sampler drops (the exporter's
        checkpoints record them as sampled out, never missing); it must be cheap: it runs on the
        host's thread. ``None`` stops it."""
        self._on_drop = callback

    def get_description(self) -> str:
        return f"RagtrailSampler{{p={self._probability}}}"


def sampler_factory(arg: str | float | None = None) -> RagtrailSampler:
    """Entry point for ``OTEL_TRACES_SAMPLER=ragtrail``: the SDK passes ``OTEL_TRACES_SAMPLER_ARG``
    as a string (or ``None`` when unset, which means keep everything)."""
    if arg is None or (isinstance(arg, str) and not arg.strip()):
        return RagtrailSampler(1.0)
    try:
        probability = float(arg)
    except (TypeError, ValueError):
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG must be a probability in [0, 1], got {arg!r}") from None
    return RagtrailSampler(probability)


__all__ = [
    "RagtrailSampler",
    "sampler_factory",
    "probability_to_threshold",
    "threshold_to_probability",
    "encode_threshold",
    "decode_threshold",
    "randomness",
    "with_threshold",
]
