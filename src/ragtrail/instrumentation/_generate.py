"""A ``generate`` stage for a framework's model call at the end of a RAG pipeline (LangChain chains,
Haystack generators): what reached the prompt, and the answer that came back.

The stage's inputs are the documents the pipeline offered to the prompt (what its retrievers handed
on, or what the prompt builder was given); its outputs are those whose whole text occurs in the
prompt the model received, in offer order; every other offered document is an exclusion
``custom:not_in_prompt`` (a template that cuts or reformats a document's text did not hand the
model that text). That is arithmetic on the prompt the model really got, never a guess: when the
prompt cannot be read as text, the outputs are not recorded and the stage says so in a finding.

The answer is recorded by :func:`ragtrail.answer`'s machinery (its receipt on the pipeline span,
the text as content capture allows) without ``refused``, which only the app can say; an app that
calls ``ragtrail.answer(text, claim=..., refused=...)`` itself afterwards has the last word.
Citations are not derived here: a generated answer says which documents it used only when the app
or the library says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragtrail.contract import semconv as sc
from ragtrail.recorder.answer import answer_attributes
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.errors import guarded
from ragtrail.recorder.pipeline import current_pipeline
from ragtrail.recorder.stage import Stage

REASON_NOT_IN_PROMPT = "custom:not_in_prompt"


def _text_of(value: Any) -> str | None:
    """A message's text: a str, a ``.text`` / ``.content`` str (LangChain and Haystack messages), a
    ``{"role": ..., "content": str}`` dict or a ``(role, text)`` pair (LangChain's message shorthands,
    what a LangGraph node passes its model)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        content = value.get("content")
        return content if isinstance(content, str) else None
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], str):
        return value[1]
    for name in ("text", "content"):
        try:
            found = getattr(value, name, None)
        except Exception:
            found = None
        if isinstance(found, str):
            return found
    return None


def prompt_text(prompt: Any) -> str | None:
    """The prompt the model received as one text: a str, a LangChain ``PromptValue``
    (``to_string()``), or a list of messages (their texts joined); ``None`` when it is none of these."""
    if isinstance(prompt, str):
        return prompt
    to_string = getattr(prompt, "to_string", None)
    if callable(to_string):
        try:
            text = to_string()
        except Exception:
            text = None
        if isinstance(text, str):
            return text
    if isinstance(prompt, (list, tuple)):
        texts = [_text_of(m) for m in prompt]
        if all(t is not None for t in texts):
            return "\n".join(t for t in texts if t is not None)
    return None


def answer_text(reply: Any) -> str | None:
    """The generated answer's text: a str, a message's text, or the first of a list of replies."""
    if isinstance(reply, (list, tuple)):
        return answer_text(reply[0]) if reply else None
    return _text_of(reply)


def record_generation(s: Stage, offered: list[Candidate], prompt: Any, reply: Any) -> None:
    """Record what reached ``prompt`` of the ``offered`` documents, and the answer ``reply``."""
    for candidate in offered:
        if candidate.score is None:
            candidate.score_kind = sc.SCORE_NONE  # no score here: never a kind remembered from elsewhere
    s.inputs(offered)
    text = prompt_text(prompt)
    if text is None:
        s.finding(f"the prompt is a {type(prompt).__name__}, not text: which documents reached it is unknown")
    else:
        kept = [c for c in offered if isinstance(c.content, str) and c.content and c.content in text]
        s.outputs(kept)
        kept_ids = {id(c) for c in kept}
        for candidate in offered:
            if id(candidate) not in kept_ids:
                s.exclude(candidate, REASON_NOT_IN_PROMPT, "its text does not occur in the prompt the model received")
    said = answer_text(reply)
    if said is not None:
        record_answer(said)


@guarded("generate.answer")
def record_answer(text: str) -> None:
    """The model's answer as ``ragtrail.answer`` records it (receipt, text as captured) but without
    ``refused``: whether the reply is a refusal is the app's to say, not something a hook can know."""
    state = current_pipeline()
    run = state.answer if state is not None else None
    if run is None:
        return
    attributes = answer_attributes(run, text, None, False)
    attributes.pop(sc.ANSWER_REFUSED, None)
    run.take(attributes)


def model_name(instance: Any) -> str | None:
    """The model a generator or chat model ran (``model_name`` / ``model``), when it names one."""
    for name in ("model_name", "model"):
        try:
            value = getattr(instance, name, None)
        except Exception:
            value = None
        if isinstance(value, str) and value:
            return value
    return None


def set_model(s: Stage, instance: Any) -> None:
    model = model_name(instance)
    if model is not None:
        s.set_attribute(sc.STAGE_MODEL, model)


def mapping_text(data: Any, keys: tuple[str, ...]) -> str | None:
    """The first non-empty str under ``keys`` of a mapping (a chain's input dict)."""
    if isinstance(data, str):
        return data
    if isinstance(data, Mapping):
        for key in keys:
            value = data.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


__all__ = ["REASON_NOT_IN_PROMPT", "answer_text", "mapping_text", "model_name", "prompt_text", "record_generation", "set_model"]
