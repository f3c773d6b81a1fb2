"""How many requests one kept trace stands for: THE rule (docs/semconv.md §5, "Weights").

A trace reaches a backend through up to two samplers: the head sampler in the app (ragtrail's records
``ragtrail.sampling.probability`` / ``ragtrail.sampling.adjusted_count``, or tracestate ``ot=th``) and
a tail sampler in the gateway Collector (collector-config/gateway.yaml stamps
``ragtrail.sampling.tail.policy`` and, when it knows it, ``ragtrail.sampling.tail.probability``). The
two decide independently (the tail's probabilistic policy hashes the trace id with its own salt), so
the trace weighs head adjusted count x 1 / tail probability.

Every reader (``stats``, ``compare``, ``ls``, the gate's ``--traces``; the SQL of the warehouse
readers mirrors it) takes the weight from :func:`trace_weight` and nowhere else. A trace whose
weight is not known is counted once and said, never silently weighted as 1:

* ``unknown_policy``: a tail sampler kept it and did not say with what probability;
* ``no_record``: no sampling record at all (an app not set up by ragtrail's configurator, e.g.
  opentelemetry-distro's): what it stands for is unknown, it counts once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: how the weight was known
Basis = Literal["sampled", "tail_only", "unknown_policy", "no_record"]


@dataclass(frozen=True, slots=True)
class TraceWeight:
    """The requests one trace stands for, and on what grounds (``known`` False: counted once, said)."""

    weight: float
    basis: Basis
    head_adjusted_count: float | None = None
    tail_policy: str | None = None
    tail_probability: float | None = None

    @property
    def known(self) -> bool:
        return self.basis in ("sampled", "tail_only")


def _probability(value: Any) -> float | None:
    """A probability in (0, 1] as the wire may carry it (a bool or anything else is not one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        return None
    return float(value)


def _count(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        return None
    return float(value)


def trace_weight(head_adjusted_count: Any, tail_policy: Any, tail_probability: Any) -> TraceWeight:
    """The weight of one trace from its head adjusted count (``None``: no head sampling record) and
    what the gateway stamped (``tail_policy`` ``None``: no tail sampler said it kept the trace).

    * tail policy without a valid probability -> ``unknown_policy``, weight 1 (counted, said);
    * head record -> ``sampled``, head x 1 / tail (tail 1 when no tail sampler stamped the trace);
    * no head record, tail probability -> ``tail_only``, 1 / tail (what the head did is not known:
      such traces are said too);
    * neither -> ``no_record``, weight 1.
    """
    head = _count(head_adjusted_count)
    policy = tail_policy if isinstance(tail_policy, str) and tail_policy else None
    tail = _probability(tail_probability)
    if policy is not None and tail is None:
        return TraceWeight(1.0, "unknown_policy", head, policy, None)
    if head is None and tail is None:
        return TraceWeight(1.0, "no_record")
    weight = (head if head is not None else 1.0) / (tail if tail is not None else 1.0)
    return TraceWeight(weight, "sampled" if head is not None else "tail_only", head, policy, tail)


@dataclass
class WeightTally:
    """The traces a many-traces command read, by basis, and the requests they stand for; says how
    the figures were weighted in one sentence (:meth:`statement`), the same for stats, compare and ls."""

    traces: int = 0
    requests: float = 0.0
    by_basis: dict[str, int] = field(default_factory=dict)
    tail_stamped: int = 0

    def add(self, weight: float, basis: str, tail_stamped: bool = False) -> None:
        self.traces += 1
        self.requests += weight
        self.by_basis[basis] = self.by_basis.get(basis, 0) + 1
        self.tail_stamped += tail_stamped

    @property
    def weighted(self) -> int:
        return self.by_basis.get("sampled", 0) + self.by_basis.get("tail_only", 0)

    @property
    def unknown_policy(self) -> int:
        return self.by_basis.get("unknown_policy", 0)

    @property
    def no_record(self) -> int:
        return self.by_basis.get("no_record", 0)

    def statement(self) -> str:
        unknown = (
            f"{self.unknown_policy} traces kept by an unknown policy: rates below are of the kept traces, not of the requests"
            if self.unknown_policy
            else ""
        )
        if not self.weighted:
            if self.unknown_policy and not self.no_record:
                return unknown
            head = f"{self.traces} traces, none carries a sampling record: each counts once (figures are trace counts)"
            return head + (f"; {unknown}" if unknown else "")
        rule = (
            "head x tail adjusted count (ragtrail.sampling.adjusted_count x 1 / ragtrail.sampling.tail.probability)"
            if self.tail_stamped
            else "ragtrail.sampling.adjusted_count"
        )
        extras = ""
        if self.by_basis.get("tail_only"):
            extras += f"; {self.by_basis['tail_only']} of them carry no head sampling record and are weighted by the tail alone"
        if self.no_record:
            extras += f"; {self.no_record} carry no sampling record and count once"
        return f"{self.traces} traces standing for {self.requests:g} requests: weighted by {rule} ({self.weighted} traces carry it{extras})" + (
            f". {unknown}" if unknown else ""
        )


__all__ = ["Basis", "TraceWeight", "WeightTally", "trace_weight"]
