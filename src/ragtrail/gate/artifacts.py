"""The files a CI job uploads for a human: the report as JSON and one text file per case.

The gate fails the build on a stability metric, never on the raw manifest; the full manifest diff is
for a reviewer to read. :func:`write` puts, under ``directory``:

- ``report.json``: the ``--json`` document (every field of the report);
- ``cases/<name>.txt``: per case with a diff or a movement, its id, query, slice, trace, top-k
  movement, the stage survival of its relevant ids, its problems, then the manifest diff;
- ``cases/index.json``: which file holds which case id.

Case ids come from the eval set and are untrusted: a file name is the id reduced to
``[A-Za-z0-9._-]`` (at most 48 characters, no leading dot) plus the first 12 hex digits of the id's
sha256, so ``../../etc/passwd`` cannot leave the directory, ``CON`` or ``aux`` is not a device on
Windows, and two ids that reduce to the same characters (``a/b`` and ``a:b``, or ``A`` and ``a`` on a
case-insensitive file system) still get two files. Every line of text is written through
:func:`ragtrail.inspect.safe.plain` (``cat`` on a file is safe in a terminal) and as UTF-8.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ragtrail.inspect.safe import json_text, plain

from . import wording
from .model import CaseResult, GateReport

_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def file_name(case_id: str) -> str:
    """A file name for ``case_id`` that stays in its directory and is unique per id (see the module docstring)."""
    stem = _UNSAFE_NAME.sub("_", case_id).lstrip(".")[:48] or "case"
    digest = hashlib.sha256(case_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{stem}-{digest}.txt"


def case_text(result: CaseResult) -> str:
    """The text file of one case: what a reviewer needs before reading the diff, then the diff."""
    case = result.case
    lines = [
        f"case: {case.id}",
        f"query: {case.query}",
        f"slice: {case.slice or '(none)'}",
        f"relevant: {', '.join(case.relevant) or '(none)'}",
        f"trace: {result.trace_id or '(none)'}",
        f"movement: {wording.movement_line(result)}",
    ]
    for stage in result.stages:
        lost = ", ".join(f"{i} ({r or 'reason unknown'})" for i, r in stage.relevant_lost)
        lines.append(
            f"stage {stage.index} {wording.stage_label(stage)}: k={stage.k}, relevant kept "
            f"{len(stage.relevant_kept)}" + (f", lost {lost}" if lost else "")
        )
    if result.in_context or result.cited:
        lines.append(f"in context: {', '.join(result.in_context) or '(none)'}; cited: {', '.join(result.cited) or '(none)'}")
    if result.refused is not None:
        lines.append(f"refused: {'yes' if result.refused else 'no'}")
    lines += [f"problem {wording.problem_line(p)}" for p in result.problems]
    text = [plain(line) for line in lines]
    if result.diff_text:
        text += ["", "manifest diff against the baseline:", ""]
        text += [plain(line) for line in result.diff_text.splitlines()]
    return "\n".join(text) + "\n"


def write(report: GateReport, directory: str | Path) -> list[Path]:
    """Write the report's artifacts under ``directory`` (created if needed); the paths written, report first."""
    root = Path(directory)
    cases_dir = root / "cases"
    cases_dir.mkdir(parents=True, exist_ok=True)
    written = [root / "report.json"]
    written[0].write_text(json_text(report.to_dict(), indent=2) + "\n", encoding="utf-8")
    index: dict[str, str] = {}
    for result in report.cases:
        if result.diff_text is None and result.movement is None and not result.problems:
            continue
        name = file_name(result.case.id)
        n = 1
        while name in index:  # the same id twice in one report (the eval set refuses it; a hand-built report may not)
            n += 1
            name = file_name(result.case.id).replace(".txt", f"-{n}.txt")
        index[name] = result.case.id
        path = cases_dir / name
        path.write_text(case_text(result), encoding="utf-8")
        written.append(path)
    (cases_dir / "index.json").write_text(json_text(index, indent=2) + "\n", encoding="utf-8")
    written.append(cases_dir / "index.json")
    return written
