"""The export side of ragtrail: whole-trace span processor, local store exporter, loss accounting and
the one-switch configuration (``RagtrailConfigurator`` / :func:`configure`).

Names are imported lazily so that ``import ragtrail`` does not pull in the SDK's configuration and
OTLP exporter modules until export is actually set up.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "WholeTraceSpanProcessor": "ragtrail.export.whole_trace",
    "estimate_span_bytes": "ragtrail.export.sizing",
    "LocalStoreSpanExporter": "ragtrail.export.local_store",
    "LossLedger": "ragtrail.export.loss",
    "RagtrailConfigurator": "ragtrail.export.configurator",
    "configure": "ragtrail.export.configurator",
    "spans_to_json_line": "ragtrail.export.otlp_json",
    "encode_spans": "ragtrail.export.otlp_encode",
    "parse_request": "ragtrail.export.otlp_json",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ragtrail.export' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
