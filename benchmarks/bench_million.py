"""``ragtrail stats`` and ``compare`` over 1,000,000 traces a side: through ClickHouse (the SQL pushed
down to the server) and through the embedded engine (chdb over a local store), the Python path beside.

Setup (not timed, printed with its own times):

1. two seed stores of ``--seed`` traces (``benchmarks/make_many_store.py``: runs recorded by the real
   recorder, written by the real whole-trace processor and local-store exporter; B with a reranker
   fallback every 5th question), so A and B pair question by question;
2. ClickHouse: the e2e tier's (tests/e2e/clickhouse_backend.py: Debian's ``clickhouse-server`` when it
   can hold the exporter's schema, else chdb behind ClickHouse's HTTP interface, on 127.0.0.1, data in
   the work directory); each seed store is sent over OTLP/HTTP to the real Collector
   (otelcol-ragtrail, collector-config/clickhouse.yaml), which writes ``side_a``/``side_b.otel_traces``;
3. the embedded engine: the first ``stats``/``compare --engine columnar`` over each seed store ingests it;
4. each ``otel_traces`` (the server's two and the embedded engine's two) is multiplied in SQL to
   ``--traces`` traces (:func:`multiply_sql`): copy ``k`` of a span gets a trace id, span id and
   parent span id hashed from the original's and ``k``, its timestamps ``k`` ms earlier, and a query
   receipt hashed from the original's and ``k``, the same in A and B (so copies pair as new
   questions). The embedded engine's materialized view fills its slim table on those inserts, as it
   does on an ingest; its per-trace compare records (``inspect.columnar.per_trace``), which the
   ingest keeps for the lines it reads, are then computed once for every copy (timed, said).

Timed, ``--runs`` times each, interleaved, every one the console script in a fresh process under
``/usr/bin/time -v`` (wall, user+sys CPU, peak RSS of the ragtrail process; for ClickHouse the peak
RSS of the server process during the command too, from its ``VmHWM`` reset before each run). Output
is the user's default (the terminal text) to /dev/null. The Python path runs over ``--python-traces``
(separate stores of that many traces a side, the same generator) and is extrapolated linearly.

    .venv/bin/python benchmarks/bench_million.py --traces 1000000 --runs 3
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "e2e"))
sys.path.insert(0, str(HERE))

import clickhouse_backend as chb  # noqa: E402
from bench_clickhouse import ingest  # noqa: E402

RAGTRAIL = str(Path(sys.executable).with_name("ragtrail"))
RSS_LIMIT_MIB = 12 * 1024  # a run whose process (or the server) passes this is stopped and said so
WALL_LIMIT_S = 600.0  # likewise a run longer than this (--limit)


def multiply_sql(source: str, target: str, first: int, last: int) -> str:
    """Copies ``first``..``last - 1`` of every span of ``source`` into ``target`` (see the module
    docstring, step 4). Ids stay lower-case hex of their width; empty parent ids stay empty."""
    sha = "SpanAttributes['ragtrail.query.sha256']"
    return f"""
INSERT INTO {target} SELECT s.* REPLACE (
    lower(hex(sipHash128(TraceId, number))) AS TraceId,
    lower(hex(sipHash64(SpanId, number))) AS SpanId,
    if(ParentSpanId = '', '', lower(hex(sipHash64(ParentSpanId, number)))) AS ParentSpanId,
    Timestamp - toIntervalMillisecond(number) AS Timestamp,
    arrayMap(t -> t - toIntervalMillisecond(number), `Events.Timestamp`) AS `Events.Timestamp`,
    if(mapContains(SpanAttributes, 'ragtrail.query.sha256'),
       mapUpdate(SpanAttributes, map('ragtrail.query.sha256', lower(hex(SHA256(concat({sha}, '-', toString(number))))))),
       SpanAttributes) AS SpanAttributes)
FROM {source} AS s CROSS JOIN numbers({first}, {last - first}) AS n SETTINGS max_threads = 2
"""


def copies(seed: int, traces: int) -> int:
    if traces % seed:
        raise SystemExit(f"--traces {traces} is not a multiple of --seed {seed}")
    return traces // seed


def grow_server(clickhouse: chb.ClickHouse, database: str, n: int) -> int:
    """``database.otel_traces`` (the seed, as the Collector wrote it) grown to ``n`` copies of itself."""
    url = clickhouse.url

    def q(sql: str) -> str:
        request = urllib.request.Request(url + "/?default_format=TabSeparated", data=sql.encode(), method="POST")
        try:
            with urllib.request.urlopen(request, timeout=3600) as response:  # noqa: S310 - loopback only
                return response.read().decode()
        except urllib.error.HTTPError as exc:
            raise SystemExit(f"ClickHouse refused {sql[:200]!r}: {exc.read().decode()[:500]}") from exc

    q(f"CREATE TABLE {database}.seed AS {database}.otel_traces")
    q(f"INSERT INTO {database}.seed SELECT * FROM {database}.otel_traces")
    q(f"TRUNCATE TABLE {database}.otel_traces")
    step = max(1, n // 10)
    for first in range(0, n, step):
        q(multiply_sql(f"{database}.seed", f"{database}.otel_traces", first, min(n, first + step)))
    q(f"DROP TABLE {database}.seed")
    return int(q(f"SELECT uniqExact(TraceId) FROM {database}.otel_traces").strip())


def grow_embedded(engine_root: Path, store: Path, n: int) -> int:
    """The embedded engine's ``otel_traces`` of ``store`` grown to ``n`` copies of the ingested seed
    (copy 0 is kept as ingested, so the store's lines still match what the engine holds)."""
    os.environ["RAGTRAIL_COLUMNAR_DIR"] = str(engine_root)
    from ragtrail.inspect.columnar import per_trace
    from ragtrail.inspect.columnar.engine import ChdbEngine
    from ragtrail.inspect.columnar.schema import SCOPE_TABLE
    from ragtrail.inspect.columnar.spans import SPANS_TABLE
    from ragtrail.inspect.columnar.store import engine_dir

    engine = ChdbEngine(engine_dir(store))
    try:
        engine.run_sql("CREATE TABLE seed AS otel_traces")
        engine.run_sql("INSERT INTO seed SELECT * FROM otel_traces")
        step = max(1, n // 10)
        for first in range(1, n, step):
            engine.run_sql(multiply_sql("seed", "otel_traces", first, min(n, first + step)))
        engine.run_sql("DROP TABLE seed")
        # the copies reached otel_traces (and by its view ragtrail_spans) around the ingest, so their
        # per-trace compare records are computed here, once, as the ingest computes a new line's
        t0 = time.perf_counter()
        per_trace.rebuild(engine, SPANS_TABLE, SCOPE_TABLE)
        print(f"setup: compare records of {store.name} computed: {time.perf_counter() - t0:.1f} s", flush=True)
        return int(engine.run_sql("SELECT uniqExact(TraceId) FROM ragtrail_spans")[0][0])
    finally:
        engine.close()


def _rss_mib(pid: int, field: str = "VmRSS") -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) / 1024 if m else 0.0


def _cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of ``pid`` so far (all its threads), from /proc."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_rss(pid: int) -> float:
    """RSS of ``pid`` and its children (``/usr/bin/time`` runs ragtrail as its child)."""
    total = _rss_mib(pid)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return total
    return total + sum(_tree_rss(int(c)) for c in children)


def timed(args: list[str], env: dict[str, str], server_pid: int | None) -> dict[str, float | str]:
    """One command under /usr/bin/time -v: wall, cpu, rss (MiB), server_rss (MiB, peak during the run)."""
    if server_pid is not None:
        Path(f"/proc/{server_pid}/clear_refs").write_text("5")  # reset the server's VmHWM (peak RSS)
    server_cpu = _cpu_s(server_pid)
    with tempfile.NamedTemporaryFile("r", suffix=".time") as report, open(os.devnull, "wb") as devnull:
        proc = subprocess.Popen(
            ["/usr/bin/time", "-v", "-o", report.name, RAGTRAIL, *args], stdout=devnull, stderr=subprocess.PIPE, env=env, start_new_session=True
        )
        stopped: list[str] = []

        start = time.monotonic()

        def watch() -> None:
            while proc.poll() is None:
                if time.monotonic() - start > WALL_LIMIT_S:
                    stopped.append(f"stopped after {WALL_LIMIT_S:.0f} s")
                    os.killpg(proc.pid, signal.SIGKILL)
                    return
                if _tree_rss(proc.pid) > RSS_LIMIT_MIB or (server_pid is not None and _rss_mib(server_pid) > RSS_LIMIT_MIB):
                    stopped.append(f"stopped: over {RSS_LIMIT_MIB} MiB")
                    os.killpg(proc.pid, signal.SIGKILL)
                    return
                time.sleep(0.5)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, err = proc.communicate()
        watcher.join()
        text = report.read()
    server_rss = _rss_mib(server_pid, "VmHWM") if server_pid is not None else 0.0
    server_cpu = _cpu_s(server_pid) - server_cpu
    if stopped:
        return {"error": stopped[0], "server_rss": server_rss}
    if proc.returncode != 0:
        return {"error": f"exit {proc.returncode}: {err.decode()[-300:]}", "server_rss": server_rss}
    user = float(re.search(r"User time \(seconds\): ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    system = float(re.search(r"System time \(seconds\): ([\d.]+)", text).group(1))  # type: ignore[union-attr]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1)) / 1024  # type: ignore[union-attr]
    clock = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text).group(1)  # type: ignore[union-attr]
    wall = 0.0
    for part in clock.split(":"):
        wall = wall * 60 + float(part)
    return {"wall": wall, "cpu": user + system, "rss": rss, "server_cpu": server_cpu, "server_rss": server_rss}


def loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def report(label: str, traces: str, runs: list[dict[str, float | str]]) -> None:
    ok = [r for r in runs if "error" not in r]
    errors = [str(r["error"]) for r in runs if "error" in r]
    if not ok:
        print(f"| {label} | {traces} | {errors[0]} | | | | | 0 of {len(runs)} |", flush=True)
        return

    def med(key: str) -> float:
        return statistics.median(float(r[key]) for r in ok)

    walls = ", ".join(f"{float(r['wall']):.1f}" for r in ok)
    server = f"{med('server_cpu'):.1f} | {med('server_rss'):,.0f}" if med("server_rss") else "- | -"
    print(
        f"| {label} | {traces} | {med('wall'):.1f} ({walls}) | {med('cpu'):.1f} | {med('rss'):,.0f} | {server} | {len(ok)} of {len(runs)} |",
        flush=True,
    )
    for e in errors:
        print(f"|   ({label}: {e}) | | | | | | | |", flush=True)


def make_stores(base: Path, traces: int) -> tuple[Path, Path]:
    return chb.make_store(base / "a", traces), chb.make_store(base / "b", traces, "--fallback-every", "5")


def setup(work: Path, clickhouse: chb.ClickHouse, args: argparse.Namespace) -> tuple[Path, Path, dict[str, str]]:
    """The seed stores, and both engines filled (once: a --work directory that is ready is reused)."""
    env = {**os.environ, "RAGTRAIL_COLUMNAR_DIR": str(work / "columnar")}
    ready = work / "ready"
    print(f"setup: ClickHouse: {clickhouse.kind}, {clickhouse.url}", flush=True)
    if ready.exists():  # --work of an earlier run: its ClickHouse data and engine directory as they were
        print(f"setup: reusing {work} ({ready.read_text().strip()})", flush=True)
        return work / "seed" / "a", work / "seed" / "b", env
    t0 = time.perf_counter()
    seed_a, seed_b = make_stores(work / "seed", args.seed)
    print(f"setup: two seed stores of {args.seed} traces: {time.perf_counter() - t0:.1f} s", flush=True)
    for database, store in (("side_a", seed_a), ("side_b", seed_b)):
        seconds, spans, traces = ingest(clickhouse, store, database, work)
        print(f"setup: Collector -> ClickHouse {database}: {traces} traces, {spans} spans in {seconds:.1f} s", flush=True)
    n = copies(args.seed, args.traces)
    for database in ("side_a", "side_b"):
        t0 = time.perf_counter()
        got = grow_server(clickhouse, database, n)
        print(f"setup: ClickHouse {database}.otel_traces grown in SQL to {got} traces: {time.perf_counter() - t0:.1f} s", flush=True)
    if args.no_embedded:
        ready.write_text(f"{args.traces} traces a side from {args.seed} seed traces (ClickHouse only)\n")
        return seed_a, seed_b, env
    first = timed(["compare", str(seed_a), str(seed_b), "--engine", "columnar"], env, None)  # ingests both seed stores
    print(f"setup: embedded engine ingest of both seed stores (compare --engine columnar): {first}", flush=True)
    for store in (seed_a, seed_b):
        t0 = time.perf_counter()
        got = grow_embedded(work / "columnar", store, n)
        print(f"setup: embedded {store.name} grown in SQL to {got} traces: {time.perf_counter() - t0:.1f} s", flush=True)
    ready.write_text(f"{args.traces} traces a side from {args.seed} seed traces\n")
    return seed_a, seed_b, env


def main() -> None:
    global WALL_LIMIT_S  # noqa: PLW0603 - one knob for timed()
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=1_000_000, help="Traces a side through ClickHouse and the embedded engine.")
    parser.add_argument("--seed", type=int, default=1000, help="Distinct traces a side recorded and sent through the Collector.")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--python-traces", type=int, nargs="*", default=[10_000], help="Store sizes for the Python path (0: skip it).")
    parser.add_argument("--only", default=None, help="Run only the steps whose label matches this regex (e.g. 'stats', 'clickhouse', 'python').")
    parser.add_argument("--lookback", default="48h")
    parser.add_argument("--limit", type=float, default=WALL_LIMIT_S, help="Stop a run after this many seconds (said in the table).")
    parser.add_argument("--no-embedded", action="store_true", help="Fill and time ClickHouse only (not the embedded engine).")
    parser.add_argument("--work", type=Path, default=None, help="Work directory (default: a temporary one, removed).")
    args = parser.parse_args()
    WALL_LIMIT_S = args.limit
    with tempfile.TemporaryDirectory(prefix="ragtrail-million-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        print(f"start {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {loadavg()}", flush=True)
        clickhouse = chb.start_clickhouse(work)
        try:
            seed_a, seed_b, env = setup(work, clickhouse, args)
            server = clickhouse.proc.pid
            src_a, src_b = clickhouse.source("side_a"), clickhouse.source("side_b")
            lb = ["--lookback", args.lookback, "--timeout", "600"]  # the pushdown answers after its whole aggregate: wait for it
            steps: list[tuple[str, str, list[str], dict[str, str], int | None]] = [
                ("clickhouse: stats", f"{args.traces:,}", ["stats", "--source", src_b, *lb, "--engine", "columnar"], env, server),
                ("clickhouse: compare A B", f"{args.traces:,} a side", ["compare", src_a, src_b, *lb, "--engine", "columnar"], env, server),
                (
                    "clickhouse: compare A B --keep-records",
                    f"{args.traces:,} a side",
                    ["compare", src_a, src_b, *lb, "--engine", "columnar", "--keep-records"],
                    env,
                    server,
                ),
                ("embedded: stats", f"{args.traces:,}", ["stats", "--source", str(seed_b), "--engine", "columnar"], env, None),
                ("embedded: compare A B", f"{args.traces:,} a side", ["compare", str(seed_a), str(seed_b), "--engine", "columnar"], env, None),
            ]
            for size in [s for s in args.python_traces if s]:
                a, b = make_stores(work / f"py-{size}", size)
                steps += [
                    ("python: stats", f"{size:,}", ["stats", "--source", str(b), "--engine", "python"], env, None),
                    ("python: compare A B", f"{size:,} a side", ["compare", str(a), str(b), "--engine", "python"], env, None),
                ]
            steps = [s for s in steps if (args.only is None or re.search(args.only, s[0])) and not (args.no_embedded and s[0].startswith("embedded"))]
            results: dict[str, list[dict[str, float | str]]] = {f"{s[0]} {s[1]}": [] for s in steps}
            for n in range(args.runs):
                print(f"run {n + 1}: {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {loadavg()}", flush=True)
                for label, traces, cmd, run_env, pid in steps:
                    got = timed(cmd, run_env, pid)
                    print(f"  {label} ({traces}): {got}", flush=True)
                    results[f"{label} {traces}"].append(got)
            print(f"end {time.strftime('%H:%M:%S', time.gmtime())} UTC, load average {loadavg()}\n", flush=True)
            print("| path: command | traces | wall s, median (runs) | CPU s | peak RSS MiB | server CPU s | server peak RSS MiB | runs done |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for label, traces, *_ in steps:
                report(label, traces, results[f"{label} {traces}"])
            print("\ncommands (SRC_A/SRC_B: clickhouse+http://127.0.0.1:PORT/side_a|side_b; STORE_A/B: the seed stores):")
            for label, _, cmd, *_ in steps:
                print(f"  {label}: ragtrail {' '.join(cmd)}")
        finally:
            clickhouse.stop()


if __name__ == "__main__":
    main()
