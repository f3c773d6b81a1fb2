"""Zero code change: a real LlamaIndex script run under ``opentelemetry-instrument`` exports one span
per retrieval stage, found through the ``ragtrail_llama_index`` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core")

from ragtrail.contract import semconv as sc  # noqa: E402

TESTS_DIR = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from instrumentation.test_llama_index_support import ScriptedLLM, build_index
    from llama_index.core.postprocessor import LongContextReorder, SimilarityPostprocessor

    engine = build_index().as_query_engine(
        llm=ScriptedLLM(), similarity_top_k=8, response_mode="simple_summarize",
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=0.1), LongContextReorder()])
    response = engine.query("why do cats sleep so much")
    print("SOURCES", ",".join(n.node.node_id for n in response.source_nodes))
""")


def _value(v: dict):
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in v:
            return v[key]
    if "intValue" in v:
        return int(v["intValue"])
    if "arrayValue" in v:
        return [_value(x) for x in v["arrayValue"].get("values", [])]
    return v


def _spans(directory: Path) -> list[dict]:
    spans = []
    for path in sorted(directory.glob("traces-*.jsonl")):
        for line in path.read_text().splitlines():
            request = json.loads(line)
            for rs in request.get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    spans.extend(ss.get("spans", []))
    return spans


def test_opentelemetry_instrument_exports_llama_index_stages(tmp_path):
    script = tmp_path / "app.py"
    script.write_text(SCRIPT.format(tests=str(TESTS_DIR)))
    store = tmp_path / "store"
    others = [e.name for e in entry_points(group="opentelemetry_instrumentor") if e.name != "ragtrail_llama_index"]
    env = {
        **os.environ,
        "OTEL_TRACES_EXPORTER": "ragtrail_file",
        sc.ENV_LOCAL_STORE_DIR: str(store),
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
        "OTEL_SERVICE_NAME": "llama-app",
        "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": ",".join(others),
    }
    out = subprocess.run(
        [str(VENV_BIN / "opentelemetry-instrument"), sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    sources = next(line for line in out.stdout.splitlines() if line.startswith("SOURCES ")).split(" ", 1)[1].split(",")

    spans = _spans(store)
    names = sorted(s["name"] for s in spans)
    assert names == sorted(
        [
            "pipeline RetrieverQueryEngine",
            "retrieve VectorIndexRetriever",
            "filter SimilarityPostprocessor",
            "rerank LongContextReorder",
            "budget PromptHelper",
            "generate SimpleSummarize",
        ]
    )
    assert len({s["traceId"] for s in spans}) == 1
    by_name = {s["name"]: s for s in spans}
    root = by_name["pipeline RetrieverQueryEngine"]
    assert "parentSpanId" not in root or not root["parentSpanId"]
    attributes = {a["key"]: _value(a["value"]) for a in by_name["filter SimilarityPostprocessor"]["attributes"]}
    assert attributes[sc.STAGE_KIND] == sc.KIND_FILTER and attributes[sc.STAGE_THRESHOLD] == 0.1
    excluded = [e for e in by_name["filter SimilarityPostprocessor"]["events"] if e["name"] == sc.EVENT_EXCLUSION]
    assert excluded and all(
        {a["key"]: _value(a["value"]) for a in e["attributes"]}[sc.EXCLUSION_REASON] == sc.REASON_BELOW_SCORE_THRESHOLD for e in excluded
    )
    # schema 3: the generate stage's sources are its output columns
    generate = {a["key"]: _value(a["value"]) for a in by_name["generate SimpleSummarize"]["attributes"]}
    assert generate[sc.COLUMN_IDS] == sources
