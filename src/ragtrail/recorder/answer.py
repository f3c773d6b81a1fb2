"""``ragtrail.answer()``: the answer the app gave, as a receipt on the pipeline span (docs/semconv.md §5).

The retrieval manifest says what evidence reached the model; the answer receipt says what came
back, so a reader can tell which answer a trace belongs to (and whether it was cut in transit)
without the text itself leaving the process unless content capture allows it.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from ragtrail import settings
from ragtrail.contract import semconv as sc
from ragtrail.contract.receipts import receipt
from ragtrail.recorder.errors import guarded
from ragtrail.recorder.metrics import note_refused
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.values import wire_text

__all__ = ["answer", "answer_attributes"]

_log = logging.getLogger("ragtrail")
_said_outside = False


class _Finds(Protocol):
    """Where a finding about the answer is said: the run's answer (``PipelineState.answer``) or a stage."""

    def finding(self, text: str) -> None: ...


@guarded("answer")
def answer(text: Any, *, claim: str | None = None, refused: bool = False) -> None:
    """Record the pipeline's answer on the current pipeline span: its receipt (chars, bytes,
    sha256), the text itself only with content capture ``full`` (``preview``: the ``preview@1``
    cut), the kind of claim it makes (``presence``, ``absence``, ``none``; anything else is a
    finding on the stage, not an error) and whether the app refused to answer.

    Never raises into the app (an internal error is counted). Outside a pipeline (or when it is
    sampled out) it records nothing; the run's ``ragtrail.pipeline.runs`` metric still learns ``refused``."""
    note_refused(refused)
    state = current_pipeline()
    run = state.answer if state is not None else None
    if run is None:
        _outside()
        return
    run.take(answer_attributes(run, text, claim, refused))


def answer_attributes(stage: _Finds, text: Any, claim: str | None, refused: bool) -> dict[str, Any]:
    """The answer's attributes under the capture settings in force; an invalid claim becomes a
    finding of ``stage`` (the run's answer, ``PipelineState.answer``, says it on the pipeline
    stage) and is not written."""
    config = settings.get()
    attributes: dict[str, Any] = {}
    if text is not None:
        attributes.update(receipt(text).as_attributes(sc.ANSWER_RECEIPT_PREFIX))
        shown = config.content_for(wire_text(text))
        if shown is not None:
            attributes[sc.ANSWER_PREVIEW if config.content_is_preview() else sc.ANSWER_TEXT] = shown
    if claim is not None:
        if claim in sc.ANSWER_CLAIMS:
            attributes[sc.ANSWER_CLAIM] = claim
        else:
            stage.finding(f"invalid answer claim {claim!r} (not one of {', '.join(sc.ANSWER_CLAIMS)}): not recorded")
    attributes[sc.ANSWER_REFUSED] = bool(refused)
    return attributes


def _outside() -> None:
    global _said_outside
    if not _said_outside:
        _said_outside = True
        _log.debug("ragtrail.answer() called outside any recorded pipeline: nothing recorded")
