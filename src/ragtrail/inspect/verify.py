"""Fidelity: is what arrived what the producer stamped? Pure arithmetic over receipts and counts.

Checks, each producing an alarm that names trace, span, stage, candidate and field:

* every receipt (query text, candidate content) classified with :func:`ragtrail.contract.receipts.classify`:
  the received preview/text against its receipt, or, when no payload was captured, the receipt
  against the same candidate's receipt one stage upstream (a change there needs a transform rule
  whose ``derived_from`` is the upstream sha256);
* a stage's events counted against ``ragtrail.events.count`` and hashed against
  ``ragtrail.events.digest``, continuation spans against ``ragtrail.events.spans``;
* spans counted against ``ragtrail.trace.span_count`` on each exported segment's local root;
* dropped counts (the SDK's evictions) and a backend's partial flag (Tempo ``status: PARTIAL``).

The producer's stamps are never recomputed or trusted beyond arithmetic: nothing here imports the
recorder. The receipt checks live in :mod:`ragtrail.inspect.verify_receipts`, the count and stage-receipt
checks in :mod:`ragtrail.inspect.verify_counts`, what they conclude in :mod:`ragtrail.inspect.fidelity`.
"""

from __future__ import annotations

from .fidelity import Alarm, Fidelity, Ledger, Where
from .model import Trace
from .stages import Stitched
from .verify_counts import CountChecks
from .verify_receipts import ReceiptChecks


def _partial(ledger: Ledger) -> None:
    """A backend's partial flag, pinned on the root it returned (a span without a parent), else the first span."""
    trace = ledger.trace
    root = next((s for s in trace.spans if not s.parent_span_id), trace.spans[0] if trace.spans else None)
    ledger.f.alarms.append(
        Alarm(trace.trace_id, root.span_id if root else "-", "", "", "status", "backend returned a partial trace", trace.partial_message or "")
    )


def check(trace: Trace, stitched: Stitched, key: bytes | None = None) -> Fidelity:
    """All fidelity checks for one trace (``key``: the receipt key, to check keyed stage receipts)."""
    ledger = Ledger(trace)
    if trace.partial:
        _partial(ledger)
    counts = CountChecks(ledger, stitched, key)
    for view in [*stitched.pipelines, *stitched.stages]:
        counts.events(view)
    counts.orphans()
    counts.dropped()
    counts.span_count()
    ReceiptChecks(ledger, stitched).receipts()
    for view in [*stitched.pipelines, *stitched.stages]:
        counts.stage_receipt(view)
    ledger.f.notes.extend(trace.notes)
    return ledger.f


__all__ = ["Alarm", "Fidelity", "Where", "check"]
