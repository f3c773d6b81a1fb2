"""Issue 11's cost benchmark: ragtrail beside OpenInference on a pipeline shaped like the users'.

Pipeline, built twice from the same generated corpus and the same BM25 (``rank_bm25``):
  BM25 top 100 over 3,000 chunks -> score cutoff -> rerank to 10 -> word budget
- LangChain: ``ContextualCompressionRetriever`` over a ``DocumentCompressorPipeline`` of three
  compressors (cutoff on ``metadata["score"]``, a deterministic word-overlap reranker writing
  ``metadata["relevance_score"]`` with ``top_n=10``, a word budget); the base retriever is
  langchain-community's ``BM25Retriever`` (k=100) writing each document's BM25 score into metadata.
- LlamaIndex: a BM25 ``BaseRetriever`` (top 100, ``NodeWithScore``) and three node postprocessors
  (``SimilarityPostprocessor`` cutoff, the same overlap reranker with ``top_n=10``, a word budget), run
  by a ``RetrieverQueryEngine`` with the ``no_text`` synthesizer (no LLM).

Modes (each framework x mode in a fresh process, so no instrumentor leaks into another):
  none           no instrumentation
  ragtrail       ragtrail's LangChainInstrumentor / LlamaIndexInstrumentor
  openinference  openinference-instrumentation-langchain / -llama-index, set up in code (FACTS.md:
                 opentelemetry-instrument skips OpenInference's LlamaIndex instrumentor unless
                 llama-index-multi-modal-llms-openai is installed)
Every mode has a real SDK ``TracerProvider`` + ``BatchSpanProcessor`` into an exporter that encodes OTLP
protobuf in this process as each tool's users would, and drops the bytes: ragtrail through its exporters'
encoder (``ragtrail.export.otlp_encode.encode_request``: native when installed, 32-span chunks), none and
OpenInference through the stock one (``encode_spans(...).SerializeToString()``). Rounds are
interleaved: every round runs every framework x mode once, so a change in machine load hits all alike.

Figures per framework and mode: added p50 (ms, and x none), p95 x none, CPU per query x none
(``time.process_time()`` around the measured loop after a warm-up, a final ``force_flush`` inside it:
all threads, the exporter's included), spans / attributes / events per query (counted from the exported
spans of separate, untimed queries; attributes = span attributes + event attributes).

Run (OpenInference lives only in .venv-bench, see benchmarks/README.md):
    .venv-bench/bin/python benchmarks/bench_users_pipeline.py --queries 300 --rounds 3
    .venv/bin/python benchmarks/bench_users_pipeline.py --smoke --modes none,ragtrail --json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

FRAMEWORKS = ("langchain", "llama_index")
MODES = ("none", "ragtrail", "openinference")
N_CHUNKS = 3000
TOP_K = 100
CUTOFF = 4.0  # BM25 score below which a candidate is cut (about a third of the 100 go)
RERANK_TOP_N = 10
WORD_BUDGET = 160  # the 10 reranked chunks hold ~330 words: the budget keeps about half
COUNTED_QUERIES = 20


# --- the shared data and scorers ------------------------------------------------------------------------
def corpus(n_chunks: int) -> tuple[list[str], list[str]]:
    """Generated chunks (Zipf-like words) and queries; deterministic."""
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(800)]
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(vocabulary))]
    texts = [" ".join(rng.choices(vocabulary, weights, k=rng.randint(20, 45))) for _ in range(n_chunks)]
    queries = [" ".join(rng.choices(vocabulary[:300], k=5)) for _ in range(2000)]
    return texts, queries


def overlap_score(query: str, passage: str) -> float:
    """The offline reranker: query-word overlap, length-normalised (stands in for a cross-encoder)."""
    words = passage.split()
    return len(set(query.split()) & set(words)) / (1.0 + len(words)) ** 0.5


def words_in(text: str) -> int:
    return len(text.split())


# --- LangChain ----------------------------------------------------------------------------------------
def build_langchain(texts: list[str]) -> Callable[[str], Any]:
    from langchain_classic.retrievers import ContextualCompressionRetriever
    from langchain_classic.retrievers.document_compressors import DocumentCompressorPipeline
    from langchain_community.retrievers import BM25Retriever
    from langchain_core.documents import BaseDocumentCompressor, Document

    class ScoredBM25Retriever(BM25Retriever):
        """BM25Retriever that keeps each document's BM25 score in ``metadata["score"]`` (as users do)."""

        def _get_relevant_documents(self, query: str, *, run_manager: Any) -> list[Document]:
            scores = self.vectorizer.get_scores(self.preprocess_func(query))
            best = sorted(range(len(self.docs)), key=lambda i: -scores[i])[: self.k]
            return [
                Document(page_content=self.docs[i].page_content, id=self.docs[i].id, metadata={**self.docs[i].metadata, "score": float(scores[i])})
                for i in best
            ]

    class ScoreCutoff(BaseDocumentCompressor):
        cutoff: float = CUTOFF

        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> list[Document]:
            return [d for d in documents if d.metadata.get("score", 0.0) >= self.cutoff]

    class OverlapReranker(BaseDocumentCompressor):
        top_n: int = RERANK_TOP_N

        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> list[Document]:
            scored = sorted(((overlap_score(query, d.page_content), i) for i, d in enumerate(documents)), key=lambda p: (-p[0], p[1]))
            out = []
            for score, i in scored[: self.top_n]:
                d = documents[i]
                out.append(Document(page_content=d.page_content, id=d.id, metadata={**d.metadata, "relevance_score": score}))
            return out

    class WordBudget(BaseDocumentCompressor):
        max_words: int = WORD_BUDGET

        def compress_documents(self, documents: Any, query: str, callbacks: Any = None) -> list[Document]:
            kept, used = [], 0
            for d in documents:
                n = words_in(d.page_content)
                if used + n <= self.max_words:
                    kept.append(d)
                    used += n
            return kept

    docs = [Document(page_content=t, id=f"c{i}", metadata={"source": f"doc{i // 10}"}) for i, t in enumerate(texts)]
    base = ScoredBM25Retriever.from_documents(docs, k=TOP_K)
    retriever = ContextualCompressionRetriever(
        base_retriever=base, base_compressor=DocumentCompressorPipeline(transformers=[ScoreCutoff(), OverlapReranker(), WordBudget()])
    )
    return retriever.invoke


# --- LlamaIndex ---------------------------------------------------------------------------------------
def build_llama_index(texts: list[str]) -> Callable[[str], Any]:
    from llama_index.core import Settings
    from llama_index.core.llms import MockLLM
    from llama_index.core.postprocessor import SimilarityPostprocessor
    from llama_index.core.postprocessor.types import BaseNodePostprocessor
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.response_synthesizers import get_response_synthesizer
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode
    from rank_bm25 import BM25Okapi

    nodes = [TextNode(text=t, id_=f"c{i}", metadata={"source": f"doc{i // 10}"}) for i, t in enumerate(texts)]
    bm25 = BM25Okapi([t.split() for t in texts])

    class BM25NodeRetriever(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            scores = bm25.get_scores(query_bundle.query_str.split())
            best = sorted(range(len(nodes)), key=lambda i: -scores[i])[:TOP_K]
            return [NodeWithScore(node=nodes[i], score=float(scores[i])) for i in best]

    class OverlapRerank(BaseNodePostprocessor):
        top_n: int = RERANK_TOP_N

        def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
            query = query_bundle.query_str if query_bundle else ""
            scored = sorted(((overlap_score(query, n.node.get_content()), i) for i, n in enumerate(nodes)), key=lambda p: (-p[0], p[1]))
            return [NodeWithScore(node=nodes[i].node, score=score) for score, i in scored[: self.top_n]]

    class WordBudget(BaseNodePostprocessor):
        max_words: int = WORD_BUDGET

        def _postprocess_nodes(self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None) -> list[NodeWithScore]:
            kept, used = [], 0
            for n in nodes:
                count = words_in(n.node.get_content())
                if used + count <= self.max_words:
                    kept.append(n)
                    used += count
            return kept

    Settings.llm = MockLLM()  # never called (no_text), but resolved at construction
    engine = RetrieverQueryEngine(
        retriever=BM25NodeRetriever(),
        node_postprocessors=[SimilarityPostprocessor(similarity_cutoff=CUTOFF), OverlapRerank(), WordBudget()],
        response_synthesizer=get_response_synthesizer(response_mode="no_text", llm=MockLLM()),
    )
    return lambda q: engine.query(q).source_nodes


# --- one framework x mode in this process ------------------------------------------------------------
def instrument(framework: str, mode: str, provider: Any) -> None:
    if mode == "none":
        return
    if mode == "ragtrail":
        if framework == "langchain":
            from ragtrail.instrumentation.langchain import LangChainInstrumentor
        else:
            from ragtrail.instrumentation.llama_index import LlamaIndexInstrumentor as LangChainInstrumentor  # type: ignore[assignment]
    elif mode == "openinference":
        if framework == "langchain":
            from openinference.instrumentation.langchain import LangChainInstrumentor
        else:
            from openinference.instrumentation.llama_index import LlamaIndexInstrumentor as LangChainInstrumentor  # type: ignore
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    LangChainInstrumentor().instrument(tracer_provider=provider)


class EncodingExporter:
    """Encodes every batch as OTLP protobuf, as an OTLP exporter does in the app's process, then drops
    the bytes. When ``counting`` is on it also counts spans, attributes and events."""

    def __init__(self, mode: str = "none") -> None:
        if mode == "ragtrail":  # as ragtrail's users export: its exporters' encoder (native when installed)
            from ragtrail.export.otlp_encode import encode_request

            self._encode: Callable[[Any], bytes] = encode_request
        else:  # as OpenInference's users (and the bare app) export: the stock OTLP encoder
            from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

            self._encode = lambda spans: encode_spans(spans).SerializeToString()
        self.counting = False
        # values: every attribute value, an array's elements one each (what the exporter encodes one by
        # one); records: the candidates and exclusions ragtrail recorded, as a reader decodes them
        self.counts = {"spans": 0, "attributes": 0, "events": 0, "bytes": 0, "values": 0, "records": 0}

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        data = self._encode(spans)
        if self.counting:
            c = self.counts
            c["bytes"] += len(data)
            for span in spans:
                c["spans"] += 1
                c["attributes"] += len(span.attributes or {})
                c["events"] += len(span.events)
                c["attributes"] += sum(len(e.attributes or {}) for e in span.events)
                for attributes in [span.attributes or {}, *(e.attributes or {} for e in span.events)]:
                    c["values"] += sum(len(v) if isinstance(v, tuple) else 1 for v in attributes.values())
                c["records"] += _records(span)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def worker(framework: str, mode: str, queries: int, warmup: int, chunks: int) -> dict[str, Any]:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = EncodingExporter(mode)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))  # the SDK's defaults, as users run it
    trace.set_tracer_provider(provider)
    instrument(framework, mode, provider)
    texts, pool = corpus(chunks)
    run = build_langchain(texts) if framework == "langchain" else build_llama_index(texts)
    for q in pool[:warmup]:
        run(q)
    provider.force_flush()
    timings, out_sizes = [], []
    cpu_start = time.process_time()
    for q in pool[warmup : warmup + queries]:
        start = time.perf_counter()
        out = run(q)
        timings.append(time.perf_counter() - start)
        out_sizes.append(len(out))
    provider.force_flush()
    cpu_s = time.process_time() - cpu_start
    exporter.counting = True
    counted = pool[warmup + queries : warmup + queries + COUNTED_QUERIES]
    for q in counted:
        run(q)
    provider.force_flush()
    provider.shutdown()
    return {
        "framework": framework,
        "mode": mode,
        "wall_s": timings,
        "cpu_s": cpu_s,
        "queries": queries,
        "docs_out": statistics.mean(out_sizes),
        "per_query": {k: v / len(counted) for k, v in exporter.counts.items()},
    }


# --- the run ------------------------------------------------------------------------------------------
def _records(span: Any) -> int:
    """Candidates and exclusions a ragtrail span records (schema 3: its columns decoded; schema 2:
    its events), 0 for another tool's span."""
    from ragtrail.inspect.columns import expand

    wire = [(None, e.name, e.attributes or {}) for e in span.events]
    attributes = span.attributes or {}
    if attributes.get("ragtrail.schema", 1) >= 3:
        wire = expand(attributes, wire, None)
    return sum(1 for _, name, _ in wire if name in ("ragtrail.candidate", "ragtrail.exclusion"))


def percentile(sorted_values: list[float], p: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(round(p * (len(sorted_values) - 1))))]


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Pool one framework x mode's rounds: percentiles over every timed query, CPU summed."""
    wall = sorted(t for r in runs for t in r["wall_s"])
    n = sum(r["queries"] for r in runs)
    return {
        "p50_ms": statistics.median(wall) * 1e3,
        "p95_ms": percentile(wall, 0.95) * 1e3,
        "cpu_ms_per_query": sum(r["cpu_s"] for r in runs) * 1e3 / n,
        "queries": n,
        "rounds": len(runs),
        "docs_out": statistics.mean(r["docs_out"] for r in runs),
        "per_query": runs[-1]["per_query"],
    }


def with_ratios(results: dict[str, dict[str, dict[str, Any]]]) -> None:
    for modes in results.values():
        base = modes.get("none")
        for r in modes.values():
            if base is None:
                continue
            r["added_p50_ms"] = r["p50_ms"] - base["p50_ms"]
            r["p50_x_none"] = r["p50_ms"] / base["p50_ms"]
            r["p95_x_none"] = r["p95_ms"] / base["p95_ms"]
            r["cpu_x_none"] = r["cpu_ms_per_query"] / base["cpu_ms_per_query"]


def table(results: dict[str, dict[str, dict[str, Any]]]) -> str:
    lines = [
        "| | p50 ms | added p50 | p95 ms | p95 x none | CPU ms/query | CPU/query x none | spans/query "
        "| attributes/query | values/query | events/query | records/query | OTLP bytes/query |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for framework, modes in results.items():
        for mode, r in modes.items():
            q = r["per_query"]
            added = f"+{r['added_p50_ms']:.2f} ms (x{r['p50_x_none']:.2f})" if mode != "none" and "added_p50_ms" in r else "-"
            p95x = f"x{r['p95_x_none']:.2f}" if "p95_x_none" in r else "-"
            cpux = f"x{r['cpu_x_none']:.2f}" if "cpu_x_none" in r else "-"
            lines.append(
                f"| {framework}, {mode} | {r['p50_ms']:.2f} | {added} | {r['p95_ms']:.2f} | {p95x} | {r['cpu_ms_per_query']:.2f} | {cpux}"
                f" | {q['spans']:.1f} | {q['attributes']:,.0f} | {q.get('values', 0):,.0f} | {q['events']:,.0f}"
                f" | {q.get('records', 0):,.0f} | {q['bytes']:,.0f} |"
            )
    return "\n".join(lines)


def verdict(results: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """Issue 25's targets, stated plainly per framework (no tuning: the figures as measured): ragtrail's
    added p50 no more than OpenInference's, its p95 (x the bare pipeline) no more, its CPU per query
    no more. Issue 25 asks for the median of at least three invocations: one line per invocation here."""
    out = []
    for framework, modes in results.items():
        rt, oi = modes.get("ragtrail"), modes.get("openinference")
        if not rt or not oi or "added_p50_ms" not in rt:
            continue
        checks = [
            ("added p50 no more", rt["added_p50_ms"] <= oi["added_p50_ms"], f"+{rt['added_p50_ms']:.2f} vs +{oi['added_p50_ms']:.2f} ms"),
            ("p95 x none no more", rt["p95_x_none"] <= oi["p95_x_none"], f"x{rt['p95_x_none']:.2f} vs x{oi['p95_x_none']:.2f}"),
            (
                "CPU/query no more",
                rt["cpu_ms_per_query"] <= oi["cpu_ms_per_query"],
                f"{rt['cpu_ms_per_query']:.2f} vs {oi['cpu_ms_per_query']:.2f} ms",
            ),
        ]
        out.append(f"{framework}: " + "; ".join(f"{name}: {'MET' if ok else 'NOT MET'} ({detail})" for name, ok, detail in checks))
    return out


def add_pipeline_arguments(parser: argparse.ArgumentParser, *, modes: str, frameworks: str) -> None:
    """The options every benchmark of this pipeline takes (this one and bench_gc.py)."""
    parser.add_argument("--warmup", type=int, default=30)
    parser.add_argument("--chunks", type=int, default=N_CHUNKS)
    parser.add_argument("--modes", default=modes)
    parser.add_argument("--frameworks", default=frameworks)
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # framework:mode, run by run_worker


def run_worker(script: str, spec: str, options: list[str], failed: list[str]) -> dict[str, Any] | None:
    """``script --worker spec options`` in a fresh process (no instrumentor leaks into another): its
    last stdout line as JSON, or ``None`` with ``spec`` added to ``failed`` and its stderr shown."""
    env = dict(os.environ, OTEL_SDK_DISABLED="false", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, script, "--worker", spec, *options], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        failed.append(spec)
        print(f"{spec}: failed\n{proc.stderr[-3000:]}", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=300, help="timed queries per framework x mode x round")
    parser.add_argument("--rounds", type=int, default=3)
    add_pipeline_arguments(parser, modes=",".join(MODES), frameworks=",".join(FRAMEWORKS))
    parser.add_argument("--smoke", action="store_true", help="a quick check of the whole run: 300 chunks, 5 queries, 1 round")
    parser.add_argument("--json", action="store_true", help="print the results as one JSON object instead of the table")
    args = parser.parse_args()
    if args.smoke:
        args.queries, args.rounds, args.warmup, args.chunks = 5, 1, 2, 300
    if args.worker:
        framework, mode = args.worker.split(":")
        print(json.dumps(worker(framework, mode, args.queries, args.warmup, args.chunks)))
        return
    frameworks, modes = args.frameworks.split(","), args.modes.split(",")
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    failed: list[str] = []
    options = ["--queries", str(args.queries), "--warmup", str(args.warmup), "--chunks", str(args.chunks)]
    for _ in range(args.rounds):
        for framework in frameworks:
            for mode in modes:
                result = run_worker(__file__, f"{framework}:{mode}", options, failed)
                if result is not None:
                    runs.setdefault((framework, mode), []).append(result)
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for (framework, mode), rs in runs.items():
        results.setdefault(framework, {})[mode] = summarise(rs)
    with_ratios(results)
    if args.json:
        print(json.dumps({"results": results, "verdict": verdict(results), "failed": failed}))
    else:
        print(table(results))
        for line in verdict(results):
            print(line)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
