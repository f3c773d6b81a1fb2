"""ragtrail.gate.artifacts: the report JSON and one file per case, with safe names from untrusted ids."""

from __future__ import annotations

import json
from pathlib import Path

from ragtrail.gate import artifacts
from ragtrail.gate.model import GateReport
from ragtrail.inspect.safe import plain

from .outputs_reports import HOSTILE, _case, hostile, regression


def test_the_report_and_each_case_are_written(tmp_path: Path):
    report = regression()
    written = artifacts.write(report, tmp_path / "out")
    root = tmp_path / "out"
    names = {c.case.id: artifacts.file_name(c.case.id) for c in report.cases}
    assert written == [root / "report.json", *(root / "cases" / names[i] for i in ("t1", "t2", "l1")), root / "cases" / "index.json"]
    assert json.loads((root / "report.json").read_text("utf-8")) == json.loads(json.dumps(report.to_dict()))
    assert json.loads((root / "cases" / "index.json").read_text("utf-8")) == {names[i]: i for i in ("t1", "t2", "l1")}
    assert (root / "cases" / names["t1"]).read_text("utf-8").splitlines() == [
        "case: t1",
        "query: question t1?",
        "slice: tables",
        "relevant: tbl-1",
        "trace: t1-trace",
        "movement: rbo 0.620; entered: new-doc; left: tbl-1 (budget app.budget, budget_exceeded)",
        "stage 0 retrieve app.search: k=20, relevant kept 1",
        "stage 1 rerank app.rerank: k=5, relevant kept 1",
        "stage 2 budget app.budget: k=3, relevant kept 0, lost tbl-1 (budget_exceeded)",
        "refused: no",
        "",
        "manifest diff against the baseline:",
        "",
        "budget app.budget: left tbl-1 budget_exceeded",
    ]


def test_file_names_stay_in_the_directory_and_never_collide():
    ids = ["../../etc/passwd", "..", ".", "/abs", "a/b", "a:b", "a\\b", "A", "a", "CON", "aux", "x" * 500, "é", "\x00", "\ud800", HOSTILE]
    names = [artifacts.file_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert len({n.lower() for n in names}) == len(ids)  # a case-insensitive file system too
    for name in names:
        assert Path(name).name == name and not name.startswith(".") and name.endswith(".txt") and len(name) <= 48 + 17
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert artifacts.file_name("../../etc/passwd").startswith("_.._etc_passwd-")
    assert artifacts.file_name("CON").startswith("CON-")


def test_hostile_case_text_is_one_printable_line_per_datum(tmp_path: Path):
    report = hostile()
    written = artifacts.write(report, tmp_path)
    assert [p.parent for p in written] == [tmp_path, tmp_path / "cases", tmp_path / "cases"]
    text = written[1].read_text("utf-8")
    assert "\x1b" not in text and "\x00" not in text and "\r" not in text and "\u202e" not in text
    lines = text.splitlines()
    assert lines[0] == f"case: {plain(HOSTILE)}"
    diff = [plain(x) for x in (HOSTILE + "\n\x1b[2J\x00\ufffe\ud800").splitlines()]  # the diff's own lines, each made inert
    assert len(diff) == 4 and lines[-4:] == diff
    assert json.loads(written[0].read_text("utf-8"))["cases"][0]["case"]["id"] == HOSTILE  # JSON keeps the value itself


def test_a_case_id_twice_gets_two_files(tmp_path: Path):
    a, b = _case("same", None, ("d",)), _case("same", None, ("e",))
    written = artifacts.write(GateReport(verdict="PASS", checks=[], problems=[], cases=[a, b]), tmp_path)
    first = artifacts.file_name("same")
    assert [p.name for p in written] == ["report.json", first, first.replace(".txt", "-2.txt"), "index.json"]
    assert "relevant: e" in written[2].read_text("utf-8").splitlines()


def test_a_case_with_nothing_to_show_gets_no_file(tmp_path: Path):
    bare = _case("bare", None, ("d",))
    bare.movement = None
    written = artifacts.write(GateReport(verdict="PASS", checks=[], problems=[], cases=[bare]), tmp_path)
    assert [p.name for p in written] == ["report.json", "index.json"]
