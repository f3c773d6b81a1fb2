"""Start-up cost of ``instrument()`` for each ragtrail library instrumentation.

``opentelemetry-instrument`` calls ``instrument()`` for every installed instrumentation before the
application runs, so whatever it imports is paid by every process that merely has the library
installed. Each case runs in a fresh interpreter: import the instrumentor module, time
``Cls().instrument()``, and report whether the library got imported. Prints the median of
``--repeat`` runs. Usage::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_instrument_startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

MODULES = {
    "llama_index": ("ragtrail.instrumentation.llama_index", "LlamaIndexInstrumentor", "llama_index"),
    "haystack": ("ragtrail.instrumentation.haystack", "HaystackInstrumentor", "haystack"),
    "chromadb": ("ragtrail.instrumentation.chromadb", "ChromaInstrumentor", "chromadb"),
    "qdrant": ("ragtrail.instrumentation.qdrant", "QdrantInstrumentor", "qdrant_client"),
    "faiss": ("ragtrail.instrumentation.faiss", "FaissInstrumentor", "faiss"),
    "rerankers": ("ragtrail.instrumentation.rerankers", "RerankersInstrumentor", "rerankers"),
    "sentence_transformers": ("ragtrail.instrumentation.sentence_transformers", "SentenceTransformersInstrumentor", "sentence_transformers"),
    "cohere": ("ragtrail.instrumentation.cohere", "CohereInstrumentor", "cohere"),
    "flashrank": ("ragtrail.instrumentation.flashrank", "FlashrankInstrumentor", "flashrank"),
}
CODE = """
import sys, time, importlib
cls = getattr(importlib.import_module({module!r}), {cls!r})
start = time.perf_counter()
cls().instrument()
print(time.perf_counter() - start, {package!r} in sys.modules)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, (module, cls, package) in MODULES.items():
        times, imported = [], "?"
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-c", CODE.format(module=module, cls=cls, package=package)], capture_output=True, text=True)
            if out.returncode:
                print(f"{name:22s} error: {out.stderr.strip().splitlines()[-1:]}")
                break
            seconds, imported = out.stdout.split()
            times.append(float(seconds))
        if times:
            print(f"{name:22s} instrument() median {statistics.median(times) * 1000:8.1f} ms   library imported: {imported}")


if __name__ == "__main__":
    main()
