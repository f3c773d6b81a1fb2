"""Replacements (issue 24, principle 2): a stage that hands on a different document in place of the
ones it found (LangChain's ParentDocumentRetriever: child chunks -> their parent; LlamaIndex's
AutoMergingRetriever: leaves -> the node they merge into). The replacement is an output under rule
``merge@1`` whose ``derived_from`` names the ids it replaced; each replaced candidate is an exclusion
``custom:merged`` ("into <id>"), so its fate can follow it into the replacement, never "unexplained"
and never a content change nobody cited (the replacement is a new id, with no upstream to differ from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragtrail.contract import semconv as sc
from ragtrail.contract.columns import replaced_ids_cell
from ragtrail.recorder.candidates import Candidate
from ragtrail.recorder.stage import Stage

__all__ = ["record_replacements"]


def record_replacements(s: Stage, inputs: Sequence[Candidate], outputs: Sequence[Candidate], sources: Mapping[str, Sequence[str]]) -> None:
    """Record ``inputs`` -> ``outputs`` where ``sources`` maps a replacement's id to the input ids it
    replaced (in input order); an output not in ``sources`` is handed on as it came."""
    into: dict[str, str] = {}
    for out in outputs:
        replaced = [i for i in sources.get(out.id, ()) if i != out.id]
        if replaced:
            out.transform_rule, out.derived_from = sc.RULE_MERGE, replaced_ids_cell(replaced)
            for ident in replaced:
                into.setdefault(ident, out.id)
    s.inputs(list(inputs))
    s.outputs(list(outputs))
    kept = {c.id for c in outputs}
    for candidate in inputs:
        target = into.get(candidate.id)
        if target is not None and candidate.id not in kept:
            s.exclude(candidate.id, sc.REASON_MERGED, f"into {target}")
