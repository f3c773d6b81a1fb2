"""The documentation-app runner: one app file, run twice in real processes (once plain, once under
``opentelemetry-instrument`` with ragtrail's configurator writing a local store), then read back
with the real ``ragtrail`` CLI (``ls --json``, ``verify --json``, ``show --json``).

Why twice: an app copied from a framework's documentation must behave exactly as it does without
ragtrail (same stdout, nothing on stderr), and the manifest is judged against the real store, as a
new user would read it. Apps live next to this file (``tests/apps/<framework>_*.py``); each one says in a
header comment which documentation page it comes from and what was swapped for an offline stand-in.
Data folders an app reads (``SimpleDirectoryReader("data")``) live in ``tests/apps/data/<name>/`` and
are copied into the app's working directory as ``data/``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

APPS = Path(__file__).parent
DATA = APPS / "data"
BIN = Path(sys.executable).parent

# what every offline app gets: no model download, no phone-home, tiktoken from llama-index's bundle
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "HAYSTACK_TELEMETRY_ENABLED": "False",
    "DO_NOT_TRACK": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TQDM_DISABLE": "1",
}


def _tiktoken_cache() -> dict[str, str]:
    try:
        import llama_index.core

        bundled = Path(llama_index.core.__file__).parent / "_static" / "tiktoken_cache"
        return {"TIKTOKEN_CACHE_DIR": str(bundled)} if bundled.is_dir() else {}
    except ImportError:  # pragma: no cover - no LlamaIndex installed
        return {}


@dataclass
class AppRun:
    """One app's two runs and its store, with the real CLI to read it."""

    name: str
    workdir: Path
    store: Path
    plain_stdout: str
    plain_stderr: str
    stdout: str
    stderr: str
    spans: list[Any] = field(default_factory=list)

    def ragtrail(self, *args: str, ok_codes: tuple[int, ...] = (0,)) -> subprocess.CompletedProcess:
        """The installed ``ragtrail`` console script against this app's store."""
        proc = subprocess.run(
            [str(BIN / "ragtrail"), *args, "--source", str(self.store)],
            capture_output=True,
            text=True,
            env=_clean_env(),
            timeout=120,
            cwd=self.workdir,
        )
        assert proc.returncode in ok_codes, f"ragtrail {' '.join(args)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc

    def traces(self) -> list[dict[str, Any]]:
        """``ragtrail ls --json``: every trace in the store, oldest first."""
        return json.loads(self.ragtrail("ls", "--json").stdout)

    def verify(self, trace_id: str) -> dict[str, Any]:
        """``ragtrail verify TRACE --json`` (exit 0 or 1; the caller asserts on the fidelity)."""
        out = self.ragtrail("verify", trace_id, "--json", ok_codes=(0, 1)).stdout
        data = json.loads(out)
        return data[0] if isinstance(data, list) else data

    def show(self, trace_id: str) -> dict[str, Any]:
        """``ragtrail show TRACE --json --all``: the manifest."""
        return json.loads(self.ragtrail("show", trace_id, "--json", "--all").stdout)

    def show_text(self, trace_id: str) -> str:
        return self.ragtrail("show", trace_id, "--all").stdout


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAGTRAIL_"))}
    env.update(OFFLINE_ENV)
    env.update(_tiktoken_cache())
    return env


def instrumented_env(store: Path, enabled: list[str] | None, service: str) -> dict[str, str]:
    """The environment of a run under ``opentelemetry-instrument``: ragtrail's configurator, the local
    store at ``store``, and only the ``enabled`` instrumentors (when None, all of ragtrail's and no
    other: another package's instrumentor installed beside them, OpenTelemetry's own LangChain one in
    the test extra, is enabled only by name)."""
    names = sorted(ep.name for ep in entry_points(group="opentelemetry_instrumentor"))
    others = [n for n in names if (n not in enabled if enabled is not None else not n.startswith("ragtrail_"))]
    env = _clean_env()
    env.update(
        {
            "OTEL_PYTHON_CONFIGURATOR": "ragtrail",
            "OTEL_TRACES_EXPORTER": "ragtrail_file",
            "OTEL_METRICS_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_SERVICE_NAME": service,
            "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS": ",".join(others),
            "RAGTRAIL_LOCAL_STORE_DIR": str(store),
        }
    )
    return env


def read_store(store: Path) -> list[Any]:
    """Every span in a local store, through the inspector's OTLP JSON reader."""
    from ragtrail.inspect.otlp import decode_document

    return [
        span
        for file in sorted(store.glob("traces-*.jsonl"))
        for line in file.read_text().splitlines()
        if line.strip()
        for span in decode_document(json.loads(line))
    ]


def run_process(argv: list[str], env: dict[str, str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd)
    assert proc.returncode == 0, f"{argv[-1]} exited {proc.returncode}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def entry_point_env(name: str, target: str, tmp_path: Path) -> dict[str, str]:
    """The entry point on the app's path when the installed ragtrail predates it (an editable
    install's metadata is written at install time): ``PYTHONPATH`` to a dist-info naming it, or nothing."""
    if any(ep.name == name for ep in entry_points(group="opentelemetry_instrumentor")):
        return {}
    meta = tmp_path / "entry-point" / f"{name}_entry_point-0.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}-entry-point\nVersion: 0\n")
    (meta / "entry_points.txt").write_text(f"[opentelemetry_instrumentor]\n{name} = {target}\n")
    return {"PYTHONPATH": os.pathsep.join(p for p in (str(meta.parent), os.environ.get("PYTHONPATH", "")) if p)}


def run_app(
    app: str | Path,
    tmp_path: Path,
    *,
    enabled: list[str] | None = None,
    data: str | None = None,
    extra_env: dict[str, str] | None = None,
    timeout: float = 300,
) -> AppRun:
    """Run the app file ``app`` (a path, or a name under tests/apps/) plain and instrumented, each in
    its own working directory under ``tmp_path`` (with ``data/`` copied from tests/apps/data/<data>),
    and return both outputs and the instrumented run's spans. ``enabled`` names the ragtrail
    instrumentor entry points to keep (e.g. ``["ragtrail_llama_index"]``); None keeps them all."""
    source = Path(app) if Path(app).is_absolute() else APPS / app
    name = source.stem
    outputs = {}
    # both runs use the same working directory path (apps print file paths: SimpleDirectoryReader's
    # file_path is in every prompt), the plain one moved aside when it is done
    workdir = Path(tmp_path) / "app"
    for mode in ("plain", "instrumented"):
        workdir.mkdir(parents=True)
        shutil.copy(source, workdir / "app.py")
        if data:
            shutil.copytree(DATA / data, workdir / "data")
        store = workdir / ".ragtrail"
        if mode == "plain":
            env = _clean_env()
            argv = [sys.executable, "app.py"]
        else:
            env = instrumented_env(store, enabled, service=name)
            argv = [str(BIN / "opentelemetry-instrument"), sys.executable, "app.py"]
        env.update(extra_env or {})
        outputs[mode] = run_process(argv, env, workdir, timeout)
        if mode == "plain":
            assert not store.exists(), "the plain run wrote a store"
            workdir.rename(Path(tmp_path) / "plain")
    plain, inst = outputs["plain"], outputs["instrumented"]
    return AppRun(
        name=name,
        workdir=workdir,
        store=store,
        plain_stdout=plain.stdout,
        plain_stderr=plain.stderr,
        stdout=inst.stdout,
        stderr=inst.stderr,
        spans=read_store(store),
    )


def run_counted(app: str, tmp_path: Path, statements: Callable[[], int], *, enabled: list[str], extra_env: dict[str, str]) -> AppRun:
    """:func:`run_app` for an app whose server counts what it receives (``statements()``), the app's
    output checked untouched: the app runs once plain on its own first, then plain and instrumented,
    and those two must send exactly twice what the one did (each run recreates what it searches, so
    every run sends the same statements): ragtrail asked the server nothing."""
    before = statements()
    subprocess.run([sys.executable, str(APPS / app)], env={**_clean_env(), **extra_env}, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    per_run = statements() - before
    before = statements()
    run = run_app(app, tmp_path, enabled=enabled, extra_env=extra_env)
    assert statements() - before == 2 * per_run
    assert_host_untouched(run)
    return run


def manifests(run: AppRun) -> list[dict[str, Any]]:
    """Every trace's manifest, each verified first: no alarm, nothing changed without a rule."""
    out = []
    for trace in run.traces():
        report = run.verify(trace["trace_id"])
        fidelity = report["fidelity"]
        assert fidelity["alarms"] == [] and fidelity["changed_uncited"] == 0, report
        assert fidelity["missing_events"] == 0 and fidelity["missing_spans"] == 0, report
        out.append(run.show(trace["trace_id"]))
    return out


def assert_host_untouched(run: AppRun, *, stderr_empty: bool = True) -> None:
    """The app behaves as without ragtrail: same stdout, the same stderr (the app's own warnings
    included: they must not disappear because an import moved inside ragtrail), and by default
    nothing on stderr at all."""
    assert run.stdout == run.plain_stdout, f"stdout changed under instrumentation:\n--- plain\n{run.plain_stdout}\n--- instrumented\n{run.stdout}"
    assert run.stderr == run.plain_stderr, f"stderr changed:\n--- plain\n{run.plain_stderr[-2000:]}\n--- instrumented\n{run.stderr[-2000:]}"
    if stderr_empty:
        assert run.stderr == "", run.stderr[-3000:]
