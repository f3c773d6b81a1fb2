"""Producer-stamped receipts (size + sha256) and the arithmetic that checks them.

A receipt is stamped once, by the stage that hands a payload over, and never rewritten downstream.
Anything between the producer and the reader (the SDK's limits, a collector's ``truncate_all``, a
backend's size cap) that changes a payload is caught by comparing what arrived with its receipt.
A cut that a versioned transform rule authorises (a 256-character preview, a declared truncation,
a budget trim) is told apart from a silent one. Both the recorder and the inspector use this package:
it is part of the wire contract (docs/semconv.md §3-4), not of either side: the rules written once
here (receipt attribute names, the 64-hex and count checks, the events digest and its items) are
the ones both sides apply.

One module per concern, each name re-exported here (``from ragtrail.contract import receipts;
receipts.receipt(...)`` is how callers read them):

- :mod:`.canonical`: canonical JSON with bounded work, canonical text and bytes, a score's number;
- :mod:`.stamp`: :class:`Receipt`, its checks and the cache of recent texts' receipts;
- :mod:`.rules`: transform rules (the ``preview@1`` cut among them);
- :mod:`.verdicts`: a received payload's verdict against its receipt;
- :mod:`.digests`: the events digest and the stage receipt.
"""

from __future__ import annotations

from ragtrail.contract.receipts.canonical import (
    MAX_CHARS,
    MAX_DEPTH,
    MAX_ITEMS,
    TIME_BUDGET_S,
    Canonical,
    CutObserver,
    canonical_bytes,
    canonical_json,
    canonical_json_bounded,
    canonical_text,
    cut_observer,
    finite_or_none,
    set_cut_observer,
)
from ragtrail.contract.receipts.digests import (
    ALG_HMAC_SHA256,
    ALG_SHA256,
    FIELD_DIGEST_HEX,
    StageReceipt,
    changed_fields,
    digest_item,
    events_digest,
    float_json,
    keyed_receipt,
    parse_field_digests,
    receipt_algorithm,
    records_digest,
    sorted_events_digest,
    sorted_keys_digest,
    stage_fields,
    stage_receipt,
    stage_receipt_of,
)
from ragtrail.contract.receipts.rules import (
    BUDGET_TRIM_RULE,
    PREVIEW_CHARS,
    PREVIEW_RULE,
    SPLIT_RULE,
    TransformRule,
    metadata_header_rule,
    parse_rule,
    preview,
    truncate_rule,
)
from ragtrail.contract.receipts.stamp import (
    RECEIPT_CACHE_CHARS,
    RECEIPT_CACHE_ENTRIES,
    Receipt,
    content_id,
    is_count,
    is_sha256_hex,
    receipt,
    receipt_keys,
    sha256_hex,
)
from ragtrail.contract.receipts.verdicts import CHANGED_CITED, CHANGED_UNCITED, INTACT, UNVERIFIABLE, VERDICTS, classify

__all__ = [
    # canonical
    "MAX_CHARS",
    "MAX_DEPTH",
    "MAX_ITEMS",
    "TIME_BUDGET_S",
    "Canonical",
    "CutObserver",
    "canonical_bytes",
    "canonical_json",
    "canonical_json_bounded",
    "canonical_text",
    "cut_observer",
    "finite_or_none",
    "set_cut_observer",
    # stamp
    "RECEIPT_CACHE_CHARS",
    "RECEIPT_CACHE_ENTRIES",
    "Receipt",
    "content_id",
    "is_count",
    "is_sha256_hex",
    "receipt",
    "receipt_keys",
    "sha256_hex",
    # rules
    "BUDGET_TRIM_RULE",
    "PREVIEW_CHARS",
    "PREVIEW_RULE",
    "SPLIT_RULE",
    "TransformRule",
    "metadata_header_rule",
    "parse_rule",
    "preview",
    "truncate_rule",
    # verdicts
    "CHANGED_CITED",
    "CHANGED_UNCITED",
    "INTACT",
    "UNVERIFIABLE",
    "VERDICTS",
    "classify",
    # digests
    "ALG_HMAC_SHA256",
    "ALG_SHA256",
    "FIELD_DIGEST_HEX",
    "StageReceipt",
    "changed_fields",
    "digest_item",
    "events_digest",
    "float_json",
    "keyed_receipt",
    "parse_field_digests",
    "receipt_algorithm",
    "records_digest",
    "sorted_events_digest",
    "sorted_keys_digest",
    "stage_fields",
    "stage_receipt",
    "stage_receipt_of",
]
