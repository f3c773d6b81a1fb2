"""The columnar path for large local stores: OTLP lines ingested once into an embedded ClickHouse
(chdb) table with the Collector exporter's ``otel_traces`` schema, and ``stats`` computed in SQL.

* :mod:`.schema`: the exporter's table; :mod:`.ingest`: the incremental ingest;
* :mod:`.spans`: the slim per-span columns the statements read (a materialized view of ``otel_traces``);
* :mod:`.sql`: the statements (one weight rule, :func:`.sql.trace_weights_sql`), for any
  :class:`.engine.SqlRunner`, embedded or a ClickHouse server;
* :mod:`.stats`: the rows folded into :class:`ragtrail.inspect.stats.Stats`;
* :mod:`.store`: when the path is taken and where the engine keeps its files.
"""

from __future__ import annotations

from .engine import MissingEngine, SqlRunner, available
from .schema import SCOPE_TABLE, TABLE
from .spans import SPANS_TABLE
from .stats import NOT_COMPUTED, as_dict, stats

__all__ = ["NOT_COMPUTED", "SCOPE_TABLE", "SPANS_TABLE", "TABLE", "MissingEngine", "SqlRunner", "as_dict", "available", "stats"]
