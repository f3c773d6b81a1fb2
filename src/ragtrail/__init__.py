"""ragtrail: OpenTelemetry traces that are the retrieval manifest of a RAG pipeline.

Every stage (retrieve, fuse, rerank, filter, budget, ...) becomes a span with the query it saw,
every candidate it output with id and score, every candidate it dropped with a reason code, and
producer-stamped receipts (size + sha256) that make later truncation visible by arithmetic.
No library integration is imported here: those load through ``opentelemetry-instrument`` or
``ragtrail.instrumentation.<library>``.
"""

from __future__ import annotations

from typing import Any

from ragtrail.api import budgeter, cite, pipeline, query_transform, reranker, retriever
from ragtrail.api import filter as filter  # noqa: A004 (an attribute, not in __all__: see below)
from ragtrail.recorder.answer import answer
from ragtrail.recorder.candidates import Candidate, register_adapter
from ragtrail.recorder.corpus import set_corpus_size as corpus_size
from ragtrail.recorder.errors import internal_error_count
from ragtrail.recorder.stage import Stage, current_stage, stage
from ragtrail.settings import set_capture

__version__ = "0.1.0"

# ``filter`` is an attribute (``@ragtrail.filter``) but not in __all__: a star import must not
# shadow the builtin
__all__ = [
    "Candidate",
    "Stage",
    "answer",
    "budgeter",
    "cite",
    "configure",
    "corpus_size",
    "current_stage",
    "internal_error_count",
    "pipeline",
    "query_transform",
    "register_adapter",
    "reranker",
    "retriever",
    "set_capture",
    "stage",
]


def __getattr__(name: str) -> Any:
    # the export side (sampler, whole-trace processor, local store) loads only when asked for
    if name == "configure":
        from ragtrail.export.configurator import configure

        return configure
    raise AttributeError(f"module 'ragtrail' has no attribute {name!r}")
