"""chdb or DuckDB for the columnar path: the same job in both, on one file of a local store.

The job is what the ingest does with every line: parse the OTLP JSON line, unnest resource spans,
scope spans, spans and each span's attribute list, and find the stage spans (count them, so both
engines do all of it and return one number). One thread each, the file read from disk by the engine.

    .venv/bin/python benchmarks/make_many_store.py /tmp/many-2k --traces 2000
    .venv/bin/python benchmarks/bench_columnar_engines.py /tmp/many-2k/traces-0000.jsonl
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any


def timed(label: str, fn: Callable[[], Any]) -> None:
    start = time.perf_counter()
    result = fn()
    print(f"| {label} | {time.perf_counter() - start:.2f} | {result} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("file")
    path = parser.parse_args().file
    import chdb.session
    import duckdb

    con = duckdb.connect()
    con.execute("SET threads = 1")
    duck = f"""
    WITH spans AS (
      SELECT unnest(from_json(json_extract(sp, '$.attributes'), '[{{"key":"VARCHAR","value":"JSON"}}]')) AS kv
      FROM (SELECT unnest(from_json(json_extract(ss, '$.spans'), '["JSON"]')) AS sp FROM
            (SELECT unnest(from_json(json_extract(rs, '$.scopeSpans'), '["JSON"]')) AS ss FROM
              (SELECT unnest(from_json(json_extract(line, '$.resourceSpans'), '["JSON"]')) AS rs FROM
                 (SELECT unnest(string_split(content, chr(10))) AS line FROM read_text('{path}')) WHERE line <> '')))
    )
    SELECT count(*) FROM spans WHERE kv.key = 'ragtrail.stage.kind'
    """
    session = chdb.session.Session()
    click = f"""
    SELECT count() FROM (
      SELECT arrayJoin(JSONExtractArrayRaw(sp, 'attributes')) AS kv FROM file('{path}', 'LineAsString')
      ARRAY JOIN JSONExtractArrayRaw(line, 'resourceSpans') AS rs ARRAY JOIN JSONExtractArrayRaw(rs, 'scopeSpans') AS ss
      ARRAY JOIN JSONExtractArrayRaw(ss, 'spans') AS sp
    ) WHERE JSONExtractString(kv, 'key') = 'ragtrail.stage.kind' SETTINGS max_threads = 1
    """
    print(f"| engine ({duckdb.__version__} / chdb {chdb.__version__}) | s | stage spans |")
    print("|---|---:|---:|")
    timed("DuckDB: read_text, from_json, unnest", lambda: con.execute(duck).fetchall()[0][0])
    timed("chdb: LineAsString, JSONExtract*, ARRAY JOIN", lambda: session.query(click, "CSV").bytes().decode().strip())


if __name__ == "__main__":
    main()
