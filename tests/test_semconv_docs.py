"""docs/semconv.md is the living copy of the contract: every name semconv.py defines is documented."""

from __future__ import annotations

from pathlib import Path

from ragtrail.contract import semconv

DOCS = (Path(__file__).resolve().parents[1] / "docs" / "semconv.md").read_text(encoding="utf-8")


def _names() -> dict[str, str]:
    return {
        k: v
        for k, v in vars(semconv).items()
        if k.isupper() and isinstance(v, str) and v.startswith(("ragtrail.", "gen_ai.", "openinference.", "sampler."))
    }


def test_every_attribute_and_event_name_is_documented():
    missing = sorted(f"{k} = {v}" for k, v in _names().items() if v not in DOCS and not v.endswith(".") and f"`{v}" not in DOCS)
    assert missing == []


def test_every_reason_code_and_transform_is_documented():
    for code in (*semconv.REASONS, *semconv.QUERY_TRANSFORMS, *semconv.SCORE_KINDS, *semconv.STATUSES):
        assert f"`{code}`" in DOCS, code
