"""What the gate keeps of one case's manifest: the evidence skeleton, by id, stage by stage.

The gate judges exactly what the inspector shows: an :class:`Observation` is read from the manifest
``ragtrail.inspect.manifest.build`` makes of the trace (never from the recorder's objects), and keeps
only what the metrics and the baseline need: each evidence stage's output ids in rank order and its
exclusions with their reasons, the context, the citations, the refusal, and the identity of what was
searched (corpus size, stores, the recorded content sha256 of the relevant documents, component
versions from the resource). It is small enough to commit in a baseline file, and it can be turned
back into a manifest-shaped dict so ``ragtrail.inspect.diff`` can diff a run against its baseline.

Stages are keyed by kind, component and occurrence (``rerank my_app.rerank``, ``retrieve bm25 #2``),
the same matching ``ragtrail diff`` uses, so a stage of the baseline and of the run are the same
stage only when they sit at the same place of the same pipeline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.inspect.manifest_model import Answer, ExcludedId, Manifest, Row, Stage

#: Stages that hand evidence on: the funnel the survival metrics follow.
EVIDENCE_KINDS = (sc.KIND_RETRIEVE, sc.KIND_FUSE, sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET)
#: Resource attributes that are versions of the software, not of the OTel SDK the run happened to use.
_IGNORED_VERSIONS = frozenset({"telemetry.sdk.version", "telemetry.auto.version", "telemetry.distro.version"})


@dataclass(slots=True)
class StageObservation:
    key: str  # "rerank my_app.rerank" (+ " #2" for a second one)
    index: int  # position among the evidence stages, 0 = first
    kind: str
    component: str
    ids: list[str]  # output ids in rank order
    excluded: list[ExcludedId]
    status: str | None = None
    failure_class: str | None = None
    fallback: str | None = None

    def label_status(self) -> str:
        if self.status in (None, sc.STATUS_OK):
            return self.status or "ok"
        extra = ", ".join(x for x in (self.failure_class, f"fallback {self.fallback}" if self.fallback else None) if x)
        return f"{self.status} ({extra})" if extra else self.status


@dataclass(slots=True)
class Observation:
    trace_id: str
    stages: list[StageObservation]
    retrieved: list[str]
    in_context: list[str] | None  # None: no stage defined what reached the model (unknown, not empty)
    cited: list[str]
    cites: bool  # the pipeline records citations at all
    refused: bool | None
    answer_claim: str | None
    corpus_size: int | None
    stores: int | None
    index: list[str]  # components of the retrieve stages, sorted: the index identity
    content: dict[str, str] = field(default_factory=dict)  # relevant id -> content sha256 as recorded
    versions: dict[str, str] = field(default_factory=dict)  # resource *.version attributes
    query_sha256: str | None = None

    def stage(self, key: str) -> StageObservation | None:
        return next((s for s in self.stages if s.key == key), None)

    def seen(self) -> set[str]:
        """Every id any evidence stage output or excluded."""
        ids = set(self.retrieved) | set(self.in_context or ()) | set(self.cited)
        for s in self.stages:
            ids.update(s.ids)
            ids.update(e.id for e in s.excluded)
        return ids

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for s in out["stages"]:
            s["excluded"] = [list(e) for e in s["excluded"]]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Observation:
        stages = [StageObservation(**{**s, "excluded": [ExcludedId(str(i), r) for i, r in s["excluded"]]}) for s in d["stages"]]
        return cls(**{**d, "stages": stages})


def stage_keys(stages: list[Stage]) -> list[tuple[str, Stage]]:
    """Evidence stages of a manifest with their keys, in pipeline order."""
    seen: Counter[tuple[str, str]] = Counter()
    out = []
    for stage in stages:
        if stage.kind not in EVIDENCE_KINDS:
            continue
        base = (stage.kind, str(stage.component))
        seen[base] += 1
        key = f"{base[0]} {base[1]}" + (f" #{seen[base]}" if seen[base] > 1 else "")
        out.append((key, stage))
    return out


def _ranked(candidates: list[Row]) -> list[str]:
    order = sorted(range(len(candidates)), key=lambda i: (candidates[i].rank is None, candidates[i].rank or 0, i))
    return [str(candidates[i].id) for i in order]


def _content(manifest: Manifest, relevant: tuple[str, ...]) -> dict[str, str]:
    """The recorded content sha256 of each ``relevant`` id, as the first stage that held it said."""
    wanted = set(relevant)
    content: dict[str, str] = {}
    for s in manifest.stages:
        for row in [*s.candidates, *s.excluded]:
            ident = str(row.id)
            if ident in wanted and ident not in content and isinstance(row.sha256, str):
                content[ident] = row.sha256
    return content


def observe(manifest: Manifest, relevant: tuple[str, ...] = (), resource: dict[str, Any] | None = None) -> Observation:
    """The observation of one manifest; ``relevant`` ids get their recorded content sha256 kept."""
    stages = []
    for index, (key, s) in enumerate(stage_keys(manifest.stages)):
        stages.append(
            StageObservation(
                key=key,
                index=index,
                kind=s.kind,
                component=str(s.component),
                ids=_ranked(s.candidates),
                excluded=[ExcludedId(str(e.id), e.reason) for e in s.excluded],
                status=s.status,
                failure_class=s.failure_class,
                fallback=s.fallback,
            )
        )
    hop0 = next((h for h in manifest.query_hops if h.hop == 0), None)
    answer = manifest.answer or Answer()
    cover = manifest.coverage
    versions = {
        k: str(v) for k, v in (resource or {}).items() if k.endswith(".version") and k not in _IGNORED_VERSIONS and isinstance(v, (str, int, float))
    }
    cites = bool(manifest.cited) or any(s.kind == sc.KIND_CITE for s in manifest.stages)
    return Observation(
        trace_id=manifest.trace_id,
        stages=stages,
        retrieved=[str(r.id) for r in manifest.retrieved if r.stage == sc.KIND_RETRIEVE] or [str(r.id) for r in manifest.retrieved],
        in_context=None if manifest.in_context is None else [str(i) for i in manifest.in_context],
        cited=[str(i) for i in manifest.cited],
        cites=cites,
        refused=answer.refused if isinstance(answer.refused, bool) else None,
        answer_claim=answer.claim,
        corpus_size=cover.corpus_size,
        stores=cover.stores,
        index=sorted({s.component for s in stages if s.kind == sc.KIND_RETRIEVE}),
        content=_content(manifest, relevant),
        versions=versions,
        query_sha256=hop0.sha256 if hop0 else None,
    )


def as_manifest(obs: Observation) -> Manifest:
    """A manifest of the evidence skeleton, what ``ragtrail.inspect.diff.diff`` reads."""
    stages = [
        Stage(
            span_id="",
            parent_span_id=None,
            kind=s.kind,
            component=s.component,
            status=s.status,
            failure_class=s.failure_class,
            fallback=s.fallback,
            candidates=[Row(id=i, rank=r) for r, i in enumerate(s.ids)],
            excluded=[Row(id=e.id, reason=e.reason, keys=("reason",)) for e in s.excluded],
        )
        for s in obs.stages
    ]
    return Manifest(
        trace_id=obs.trace_id, source="", stages=stages, cited=list(obs.cited), answer=None if obs.refused is None else Answer(refused=obs.refused)
    )


__all__ = ["EVIDENCE_KINDS", "Observation", "StageObservation", "as_manifest", "observe", "stage_keys"]
