"""The reading side of ragtrail: traces from files, Jaeger or Tempo -> manifest -> verify / diff / report.

It knows only the wire contract (``ragtrail.contract.semconv`` names, ``ragtrail.contract.receipts`` arithmetic),
never the recorder, so it reads traces from any producer that follows the trace contract (docs/semconv.md).
"""

from __future__ import annotations

from .manifest import build
from .sources import open_source, resolve

__all__ = ["build", "open_source", "resolve"]
