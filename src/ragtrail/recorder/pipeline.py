"""Per-pipeline state: hop numbering, what was retrieved, what reached the model, how the stages ended.

One :class:`PipelineState` is shared by every stage of one pipeline run, also across threads and
tasks that copy the context. Lookups (``lookup_hop``, ``has_hops``, ``candidate_hop`` ...) never
change anything; a hop is created only by the explicit calls :meth:`PipelineState.new_hop` (a query
an instrumented transform produced), :meth:`PipelineState.given_hop` (a query the application
gave) and :meth:`PipelineState.untracked_hop` (a query nobody explains), so reading a hop can never start a false hop chain.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from ragtrail.contract import semconv as sc
from ragtrail.contract.run_status import roll_up

__all__ = ["Hop", "PipelineState", "QueryRecord", "RunAnswer", "current_pipeline"]


@dataclass(frozen=True)
class Hop:
    """One query hop (docs/semconv.md §2): its number, the hop it came from, and the transform."""

    number: int
    parent: int | None
    transform: str


class StoreSize(NamedTuple):
    """One store's size as a stage reported it, and whether it is an estimate."""

    size: int
    approximate: bool


class QueryRecord(NamedTuple):
    """A query as one stage saw or produced it: its hop number, the hop it came from, the
    transform, the text and its receipt (docs/semconv.md §2)."""

    hop: int
    parent: int | None
    transform: str
    text: Any
    receipt: Any


@dataclass
class RunAnswer:
    """The run's answer (``ragtrail.answer()``, a generation hook's reply), taken for the pipeline
    stage that opened a :class:`PipelineState` while that stage records: ``attributes`` are written
    on its span when it ends and mirrored on the run's cite and generate stages; ``findings`` is
    that stage's own findings list, so an invalid claim is said there, in the order it happened."""

    findings: list[str]
    attributes: dict[str, Any] | None = None
    open: bool = True  # until the pipeline stage ends: an answer given later is not taken

    def finding(self, text: str) -> None:
        """Something about the answer a reader should know (an invalid claim), said by the pipeline stage."""
        self.findings.append(text)

    def take(self, attributes: Mapping[str, Any]) -> None:
        """Keep ``attributes`` as the run's answer (the last one given wins) while the pipeline stage records."""
        if self.open:
            self.attributes = dict(attributes)


_UNSEEN: Any = object()


class PipelineState:
    """Shared by every stage of one pipeline run (also across threads that copy the context)."""

    def __init__(self, outer: PipelineState | None = None) -> None:
        # a pipeline opened inside another (a decorated pipeline called from one) rolls what it
        # read, kept and cited into the outer one as well: the outer coverage counts it
        self.outer = outer
        self._lock = threading.Lock()
        self._next_hop = 0
        self._hop_by_sha: dict[str, Hop] = {}
        self._hop_of_candidate: dict[str, int] = {}
        self._score_kind_of: dict[str, str] = {}
        # candidate id -> content sha256 and -> span id of the stage that wrote that receipt on its
        # outputs; sha None once two stages wrote different content for the id (schema 4's
        # content.from, below). Two dicts, not a tuple per candidate: fewer objects for the host's GC
        self._content_sha: dict[str, str | None] = {}
        self._content_span: dict[str, str] = {}
        self.retrieved: dict[str, None] = {}
        self.in_context: list[str] | None = None
        self.cited: dict[str, None] = {}
        self.corpus_size: int | None = None
        self._store_sizes: dict[Any, StoreSize] = {}
        self.stage_statuses: list[str] = []
        # the run's answer, when a recording pipeline stage opened this state (``None`` otherwise)
        self.answer: RunAnswer | None = None

    # --- the run open in this context --------------------------------------------------------------
    def enter(self) -> contextvars.Token[PipelineState | None]:
        """Make this the run :func:`current_pipeline` returns in this context (the stage that opened
        it, at its start); :meth:`leave` with the token restores the one before."""
        return _current.set(self)

    def leave(self, token: contextvars.Token[PipelineState | None]) -> None:
        """Restore the run open before :meth:`enter`, if that happened in this context (a stage ended
        in another context, a callback or another task, leaves it as it is)."""
        try:  # noqa: SIM105 - once per pipeline run on the host's thread: no suppress() object
            _current.reset(token)
        except ValueError:
            pass

    # --- lookups: never change anything -----------------------------------------------------------
    def lookup_hop(self, sha: str) -> Hop | None:
        """The hop of a query text (by its sha256), ``None`` when this pipeline has not seen it."""
        return self._hop_by_sha.get(sha)

    def has_hops(self) -> bool:
        """Whether any query hop exists in this pipeline yet."""
        return self._next_hop > 0

    def hop_count(self) -> int:
        """How many query hops this pipeline has numbered."""
        return self._next_hop

    def candidate_hop(self, candidate_id: str) -> int | None:
        """The hop of the query that first found this candidate in this pipeline."""
        return self._hop_of_candidate.get(candidate_id)

    def candidate_score_kind(self, candidate_id: str) -> str | None:
        """The score kind an earlier stage of this pipeline gave this candidate."""
        return self._score_kind_of.get(candidate_id)

    def content_source(self, candidate_id: str) -> tuple[str, str] | None:
        """The content sha256 an earlier stage of this pipeline wrote for this candidate on its
        outputs, and that stage's span id (16 hex); ``None`` when none did, or when two stages wrote
        different content for it (then which one a later stage saw is not known here)."""
        sha = self._content_sha.get(candidate_id)
        return None if sha is None else (sha, self._content_span[candidate_id])

    # --- creating calls ----------------------------------------------------------------------------
    def new_hop(self, sha: str, parent: int | None, transform: str) -> tuple[Hop, bool]:
        """A hop for a produced query; a text already seen in this pipeline keeps its hop (returns
        ``(hop, False)``): a multi-query transform that also returns the original makes no new hop."""
        with self._lock:
            known = self._hop_by_sha.get(sha)
            if known is not None:
                return known, False
            return self._add(sha, parent, transform), True

    def given_hop(self, sha: str) -> Hop:
        """The hop of a query the application itself gave (``MultiQueryTextRetriever.run(queries=[...])``,
        a list of the user's own questions): its known hop, else a new root hop (no parent,
        transform ``none``), never ``untracked``: nothing changed it, it is a query of its own."""
        with self._lock:
            known = self._hop_by_sha.get(sha)
            if known is not None:
                return known
            return self._add(sha, None, sc.TRANSFORM_NONE)

    def untracked_hop(self, sha: str) -> Hop:
        """The hop of a query no instrumented transform produced: its known hop, hop 0 for the first
        query of the pipeline, else a new hop marked ``untracked`` (the query changed between stages
        and nothing explains it). Its parent is not known (``None``): it is not "the previous hop",
        which may be an unrelated variant that merely came before it."""
        hop, _ = self.claim_untracked(sha)
        return hop

    def claim_untracked(self, sha: str) -> tuple[Hop, bool]:
        """:meth:`untracked_hop`, also saying whether the hop was created by this call."""
        with self._lock:
            known = self._hop_by_sha.get(sha)
            if known is not None:
                return known, False
            first = self._next_hop == 0
            return self._add(sha, None, sc.TRANSFORM_NONE if first else sc.TRANSFORM_UNTRACKED), True

    def _add(self, sha: str, parent: int | None, transform: str) -> Hop:
        hop = Hop(self._next_hop, parent, transform)
        self._next_hop += 1
        self._hop_by_sha[sha] = hop
        return hop

    # --- what the stages report --------------------------------------------------------------------
    def remember_candidate(self, candidate_id: str, hop: int | None, score_kind: str | None) -> None:
        """The first hop that found a candidate, and the latest score kind given to it."""
        if hop is not None:
            self._hop_of_candidate.setdefault(candidate_id, hop)
        if score_kind is not None:
            self._score_kind_of[candidate_id] = score_kind

    def remember_content(self, candidate_id: str, sha256: str, span_id: str) -> None:
        """A stage wrote this content receipt for the candidate on its outputs. The first stage to
        write a content is the one later stages point to; another content for the same id makes the
        id unsafe to point at (every later stage restates its receipt)."""
        with self._lock:  # stages of one pipeline may end on several threads at once
            known = self._content_sha.get(candidate_id, _UNSEEN)
            if known is _UNSEEN:
                self._content_sha[candidate_id] = sha256
                self._content_span[candidate_id] = span_id
            elif known is not None and known != sha256:
                self._content_sha[candidate_id] = None

    def add_corpus_size(self, size: int, store: Any = None, approximate: bool = False) -> None:
        """One store's size. The corpus is the sum over the distinct stores behind the pipeline
        (``store`` is its identity: a store searched by several stages counts once; the largest
        size reported for it wins)."""
        with self._lock:
            known = self._store_sizes.get(store)
            if known is None or size > known.size:
                self._store_sizes[store] = StoreSize(size, approximate)
            self.corpus_size = sum(known.size for known in self._store_sizes.values())
        if self.outer is not None:
            self.outer.add_corpus_size(size, store, approximate)

    def corpus_approximate(self) -> bool:
        with self._lock:
            return any(known.approximate for known in self._store_sizes.values())

    def add_cited(self, ids: Iterable[Any]) -> None:
        ids = [str(ident) for ident in ids]
        with self._lock:
            for ident in ids:
                self.cited[ident] = None
        if self.outer is not None:
            self.outer.add_cited(ids)

    def track(self, kind: str, ids: list[str]) -> None:
        """What a stage handed on: retrieved (retrieve, fuse), in the context (rerank, filter,
        budget: the last one wins), cited."""
        with self._lock:
            if kind in (sc.KIND_RETRIEVE, sc.KIND_FUSE):
                for ident in ids:
                    self.retrieved[ident] = None
            elif kind in (sc.KIND_RERANK, sc.KIND_FILTER, sc.KIND_BUDGET):
                self.in_context = ids
            elif kind == sc.KIND_CITE:
                for ident in ids:
                    self.cited[ident] = None
        if self.outer is not None:
            self.outer.track(kind, ids)

    def untrack(self, ids: Collection[str]) -> None:
        """Candidates a stage reported as retrieved that an enclosing retriever then trimmed: they
        were read from the store but never handed on, so they are not "retrieved"."""
        with self._lock:
            for ident in ids:
                self.retrieved.pop(ident, None)
        if self.outer is not None:
            self.outer.untrack(ids)

    def add_stage_status(self, status: str) -> None:
        with self._lock:
            self.stage_statuses.append(status)
        if self.outer is not None:
            self.outer.add_stage_status(status)

    def coverage(self) -> dict[str, Any]:
        """The pipeline's coverage statement (docs/semconv.md §3)."""
        with self._lock:
            attributes: dict[str, Any] = {sc.COVERAGE_RETRIEVED: len(self.retrieved)}
            # what reached the model is known only from a stage that defines the context: without
            # one the attribute is absent, never the retrieved count standing in for it (issue 24)
            if self.in_context is not None:
                attributes[sc.COVERAGE_IN_CONTEXT] = len(self.in_context)
            attributes[sc.COVERAGE_CITED] = len(self.cited)
            if self.corpus_size is not None:
                attributes[sc.COVERAGE_CORPUS_SIZE] = self.corpus_size
                if len(self._store_sizes) > 1:  # one store is the common case: no attribute for it
                    attributes[sc.COVERAGE_STORES] = len(self._store_sizes)
                if any(known.approximate for known in self._store_sizes.values()):
                    attributes[sc.COVERAGE_CORPUS_APPROXIMATE] = True
            if self.cited:
                attributes[sc.CITED_IDS] = list(self.cited)
        return attributes

    def run_status(self, raised: bool) -> str:
        """The run as a whole, by the one rule (contract/run_status.py)."""
        with self._lock:
            statuses = list(self.stage_statuses)
            retrieved = bool(self.retrieved)
        return roll_up(statuses, raised=raised, retrieved=retrieved)


_current: contextvars.ContextVar[PipelineState | None] = contextvars.ContextVar("ragtrail_pipeline", default=None)


def current_pipeline() -> PipelineState | None:
    """The state of the pipeline run open in this context (``None`` outside any recorded stage)."""
    return _current.get()
