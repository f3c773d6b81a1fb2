"""``ragtrail verify --checkpoints FILE``: what a backend holds against what the producer checkpointed.

The checkpoint file (docs/semconv.md §10) is replayed first: every producer's chain must hold (heads,
counts, sequence, and the MAC when a key is given), or the file is refused as a whole
(:class:`~ragtrail.inspect.errors.BadCheckpoints`, exit 9). Then, over the time the checkpoints cover:

* a trace checkpointed as exported and absent from the source is **missing**;
* a trace present whose span count or stage receipts differ from the chain's is **altered** (its
  receipts are recomputed from what arrived, so an edited value and a re-stamped copy both show);
* a trace in the source that no checkpoint names is **not checkpointed** (forged, or from a producer
  without checkpoints);
* a trace the producer counted lost, or whose root its sampler dropped, is reported as such, never
  as missing.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ragtrail.contract import checkpoints as cp
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import ALG_HMAC_SHA256, receipt_algorithm, stage_fields, stage_receipt

from .errors import BadCheckpoints, InspectError, TraceNotFound
from .model import Trace
from .sources import HttpSource, Source
from .sources.files import FileSource
from .stages import stitch

_SLACK_NS = 1_000_000  # a backend that keeps microseconds rounds a span's start by up to 1 us: 1 ms of slack


@dataclass
class Checkpointed:
    """One trace as the chain has it: the sum of its exported segments."""

    trace_id: str
    producer: str
    seq: int
    spans: int = 0
    receipts: list[str] = field(default_factory=list)


@dataclass
class Chain:
    """Every producer's records in a checkpoint file, replayed."""

    path: str
    producers: set[str] = field(default_factory=set)
    checkpoints: int = 0
    exported: dict[str, Checkpointed] = field(default_factory=dict)
    lost: dict[str, str] = field(default_factory=dict)  # trace id -> reason
    sampled_out: set[str] = field(default_factory=set)
    from_ns: int = 0
    to_ns: int = 0
    lost_traces: int = 0  # the producers' loss ledgers, summed over their last checkpoints
    lost_spans: int = 0
    keyed: bool = False

    def add(self, checkpoint: cp.Checkpoint) -> None:
        self.checkpoints += 1
        self.producers.add(checkpoint.producer)
        self.keyed |= checkpoint.key_id is not None
        self.from_ns = checkpoint.from_ns if not self.from_ns else min(self.from_ns, checkpoint.from_ns)
        self.to_ns = max(self.to_ns, checkpoint.to_ns)
        for record in checkpoint.records:
            if record.kind == cp.KIND_EXPORTED:
                entry = self.exported.get(record.trace_id)
                if entry is None:
                    entry = self.exported[record.trace_id] = Checkpointed(record.trace_id, checkpoint.producer, checkpoint.seq)
                entry.spans += record.spans
                entry.receipts.extend(record.detail.split())
            elif record.kind == cp.KIND_LOST:
                self.lost[record.trace_id] = record.detail
            else:
                self.sampled_out.add(record.trace_id)


def load_chain(path: str | Path, key: bytes | None) -> Chain:
    """Read and replay a checkpoint file; :class:`BadCheckpoints` (one line) when it does not hold."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise BadCheckpoints(
            f"cannot read the checkpoint file {path}: {exc.strerror or exc}", "pass the file RAGTRAIL_CHECKPOINT_PATH named"
        ) from None
    by_producer: dict[str, list[tuple[cp.Checkpoint, dict[str, Any]]]] = {}
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            checkpoint, body = cp.parse_checkpoint(line)
        except cp.CheckpointError as exc:
            raise BadCheckpoints(f"{path} line {number} is not a checkpoint: {exc}", "pass the file RAGTRAIL_CHECKPOINT_PATH named") from None
        by_producer.setdefault(checkpoint.producer, []).append((checkpoint, body))
    if not by_producer:
        raise BadCheckpoints(f"{path} holds no checkpoints", "pass the file RAGTRAIL_CHECKPOINT_PATH named, after the producer wrote to it")
    chain = Chain(str(path))
    for items in by_producer.values():
        items.sort(key=lambda item: item[0].seq)
        try:
            cp.replay([c for c, _ in items], [b for _, b in items], key)
        except cp.CheckpointError as exc:
            raise BadCheckpoints(f"{path}: {exc}", "the checkpoints were changed or cut: compare with the copy the other holder keeps") from None
        last = items[-1][0]
        chain.lost_traces += last.lost_traces
        chain.lost_spans += last.lost_spans
        for checkpoint, _ in items:
            chain.add(checkpoint)
    return chain


def trace_receipts(trace: Trace, key: bytes | None) -> list[str]:
    """The stage receipts of a trace as a checkpoint record keeps them, recomputed over what arrived
    (a keyed receipt without the key: the stamped one, which still shows a re-stamped copy)."""
    try:
        stitched = stitch(trace)
    except InspectError:
        return []
    parts: list[str] = []
    for view in [*stitched.pipelines, *stitched.stages]:
        stamped = view.attributes.get(sc.STAGE_RECEIPT)
        if stamped is None:
            continue
        alg = receipt_algorithm(stamped)
        if alg == ALG_HMAC_SHA256 and key is None:
            part = cp.receipt_part(stamped)
        else:
            fields = stage_fields(view.attributes, [(e.name, e.attributes) for _, e in view.wire_events()])
            part = cp.receipt_part(stage_receipt(fields, key if alg == ALG_HMAC_SHA256 else None).receipt)
        parts.append(part or "-")
    return parts


@dataclass
class Finding:
    """One named trace: what is wrong with it (or what explains its absence)."""

    trace_id: str
    detail: str


@dataclass
class CheckpointReport:
    """The answer: every list named by trace id; ``failed`` when anything is missing, altered or not checkpointed."""

    chain: Chain
    source: str
    present: int = 0
    missing: list[Finding] = field(default_factory=list)
    altered: list[Finding] = field(default_factory=list)
    not_checkpointed: list[Finding] = field(default_factory=list)
    lost: list[Finding] = field(default_factory=list)
    sampled_out: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.missing or self.altered or self.not_checkpointed)

    def as_dict(self) -> dict[str, Any]:
        chain = self.chain
        return {
            "checkpoints": chain.path,
            "source": self.source,
            "producers": len(chain.producers),
            "checkpoint_count": chain.checkpoints,
            "from_ns": chain.from_ns,
            "to_ns": chain.to_ns,
            "checkpointed": len(chain.exported),
            "present": self.present,
            "missing": [vars(f) for f in self.missing],
            "altered": [vars(f) for f in self.altered],
            "not_checkpointed": [vars(f) for f in self.not_checkpointed],
            "lost": [vars(f) for f in self.lost],
            "sampled_out": self.sampled_out,
            "producer_lost_traces": chain.lost_traces,
            "producer_lost_spans": chain.lost_spans,
            "notes": self.notes,
            "failed": self.failed,
        }


def _is_loss_record(trace: Trace) -> bool:
    return bool(trace.spans) and all(s.name == sc.LOSS_SPAN_NAME for s in trace.spans)


def _start(trace: Trace) -> int:
    return min((s.start_ns for s in trace.spans), default=0)


def _listed(source: Source, chain: Chain, now_ns: int) -> tuple[dict[str, Trace], list[str]]:
    """The source's traces within the checkpointed time (a local store: all of it, read once), by id,
    and notes on what the listing could not see."""
    if isinstance(source, FileSource):
        return {t.trace_id: t for t in source.all_traces()}, []
    lookback = f"{max(1, (now_ns - chain.from_ns) // 1_000_000_000 + 60)}s"
    notes: list[str] = []
    if isinstance(source, HttpSource):
        result = source.search_all(None, None, lookback)
        ids = result.trace_ids
        if result.capped:
            notes.append(f"{source.description}'s search was capped: traces never checkpointed may be missed")
    else:
        ids = source.search(1_000_000, None, lookback)
    notes.append(f"{source.description} lists traces with ragtrail spans only: others are not compared")
    found: dict[str, Trace] = {}
    for trace_id in ids:
        try:
            found[trace_id] = source.get(trace_id)
        except TraceNotFound:
            continue
    return found, notes


def _altered(entry: Checkpointed, trace: Trace, key: bytes | None) -> str | None:
    """Why a present trace differs from its checkpointed records, or ``None``."""
    why = []
    if len(trace.spans) != entry.spans:
        why.append(f"{len(trace.spans)} spans in the source, {entry.spans} checkpointed")
    received = Counter(trace_receipts(trace, key))
    expected = Counter(entry.receipts)
    if received != expected:
        differ = sum((expected - received).values())
        why.append(f"{differ} of {sum(expected.values())} stage receipts differ from the checkpointed ones")
    return "; ".join(why) or None


def verify_checkpoints(chain: Chain, source: Source, key: bytes | None, now_ns: int) -> CheckpointReport:
    """Compare the source with the chain (see the module docstring)."""
    report = CheckpointReport(chain, source.description)
    found, report.notes = _listed(source, chain, now_ns)
    if chain.keyed and key is None:
        report.notes.append("the checkpoints carry MACs that were not checked: pass --key-file to check them")
    for trace_id in sorted(chain.exported):
        entry = chain.exported[trace_id]
        trace = found.get(trace_id)
        if trace is None and not isinstance(source, FileSource):
            try:
                trace = source.get(trace_id)
            except TraceNotFound:
                trace = None
        if trace is None:
            report.missing.append(Finding(trace_id, f"checkpointed (producer {entry.producer}, checkpoint {entry.seq}), not in {source.description}"))
            continue
        report.present += 1
        why = _altered(entry, trace, key)
        if why is not None:
            report.altered.append(Finding(trace_id, why))
    for trace_id, reason in sorted(chain.lost.items()):
        if trace_id not in found and trace_id not in chain.exported:
            report.lost.append(Finding(trace_id, f"counted lost by the producer ({reason}), not missing"))
    report.sampled_out = sum(1 for t in chain.sampled_out if t not in found)
    low, high = chain.from_ns - _SLACK_NS, chain.to_ns + _SLACK_NS
    for trace_id in sorted(found):
        trace = found[trace_id]
        if trace_id in chain.exported or trace_id in chain.lost or _is_loss_record(trace) or not low <= _start(trace) <= high:
            continue
        extra = "; the producer's sampler dropped its root at the head" if trace_id in chain.sampled_out else ""
        report.not_checkpointed.append(Finding(trace_id, f"in {source.description} within the checkpointed time, in no checkpoint{extra}"))
    return report


__all__ = ["Chain", "CheckpointReport", "Checkpointed", "Finding", "load_chain", "trace_receipts", "verify_checkpoints"]
