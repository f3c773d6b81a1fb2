"""ragtrail.gate.terminal: the rich table, exact, and hostile trace data shown literally and inert for a CI log."""

from __future__ import annotations

from rich.console import Console

from ragtrail.gate import terminal

from .outputs_reports import MESSAGE, hostile, inconclusive, regression


def _shown(report, width: int = 120) -> list[str]:
    console = Console(width=width, record=True, color_system=None)
    terminal.render(report, console)
    return [line.rstrip() for line in console.export_text().splitlines()]


def test_a_regression_shows_the_verdict_the_checks_and_where_the_evidence_was_lost():
    assert _shown(regression()) == [
        "ragtrail gate: REGRESSION (exit 1): 4 checks, 1 failed, 0 problems, 3 cases",
        "checks",
        "┏━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━┳━━━━┳━━━━━━━━┓",
        "┃ slice  ┃ metric                     ┃ value ┃ threshold ┃ baseline ┃  n ┃ result ┃",
        "┡━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━╇━━━━╇━━━━━━━━┩",
        "│ (all)  │ recall@retrieve            │ 1.000 │  >= 0.850 │    0.900 │ 12 │ pass   │",
        "│ (all)  │ survival@budget app.budget │ 0.900 │  >= 0.850 │    0.900 │ 12 │ pass   │",
        "│ tables │ recall@retrieve            │ 1.000 │  >= 0.850 │    0.900 │ 12 │ pass   │",
        "│ tables │ survival@budget app.budget │ 0.500 │  >= 0.800 │    0.850 │ 12 │ FAIL   │",
        "└────────┴────────────────────────────┴───────┴───────────┴──────────┴────┴────────┘",
        f"FAIL tables survival@budget app.budget: {MESSAGE}",  # one line, never wrapped (120 columns here)
        "(all): lost at budget app.budget: 2 relevant lost (budget_exceeded ×2)",
        "tables: lost at budget app.budget: 2 relevant lost (budget_exceeded ×2)",
    ]


def test_inconclusive_lists_every_problem():
    lines = _shown(inconclusive())
    start = lines.index("inconclusive evidence")
    rows = [line for line in lines[start:] if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == ["sampled_out", "truncated", "receipt_alarm", "receipt_alarm", "corpus_changed"]
    assert lines[-1] == "warning: baseline frozen from 3 runs only"


def test_hostile_data_is_shown_literally_and_cannot_speak_to_the_terminal_or_the_runner():
    value = "[bold red]x[/] :smile: \x1b[31m ##[stop-commands]tok\n::error::forged and a wrap ::error::here"
    for width in (40, 80, 400):
        lines = _shown(hostile(value), width=width)
        joined = "\n".join(lines)
        assert "\x1b" not in joined and "##[" not in joined
        for line in lines:
            assert not line.lstrip().startswith("::"), line  # no line can be read as a workflow command
    lines = _shown(hostile(value), width=400)
    shown = "[bold red]x[/] :smile: \\x1b[31m ##\\x5bstop-commands]tok\\n::error::forged and a wrap ::error::here"
    assert lines[0] == "ragtrail gate: INCONCLUSIVE (exit 3): 1 checks, 1 failed, 1 problems, 1 cases"
    assert lines[5].startswith(f"│ {shown} │ recall@retrieve │")
    assert f"FAIL {shown} recall@retrieve: {shown}" in lines
    assert lines[-1] == f"warning: {shown}"
