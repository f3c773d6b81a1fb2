"""``ragtrail verify --policy FILE`` (issue 28): a trace's transform citations against a transform policy.

A receipt shows that a change happened under a rule (``changed_cited``); whether the stage was
allowed to apply that rule is a separate question, answered here: every cited rule
(``ragtrail.candidate.transform.rule``, a column from schema 3) must be granted to the citing stage's
component by the policy given, or it is an alarm ("cited, but not allowed by policy v3"). A trace
whose pipeline span names another policy (its ``ragtrail.policy.sha256`` differs) is an alarm too; a
trace that names none is checked all the same, with a note. Kept apart from the fidelity checks
(:mod:`ragtrail.inspect.verify`): the command adds these alarms to what they found.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ragtrail.contract import semconv as sc
from ragtrail.contract.policy import TransformPolicy

from .fidelity import Alarm, Ledger, Where
from .model import Trace
from .stages import StageView, stitch

__all__ = ["PolicyCheck", "check_policy"]


@dataclass
class PolicyCheck:
    """What the policy check found on one trace: alarms (each named like a fidelity alarm) and notes."""

    alarms: list[Alarm] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def check_policy(trace: Trace, policy: TransformPolicy) -> PolicyCheck:
    """The trace's transform citations against ``policy``, and the policy it says it was recorded under."""
    stitched = stitch(trace)
    ledger = Ledger(trace)
    notes: list[str] = []
    for view in stitched.pipelines[:1]:
        _recorded_under(ledger, view, policy, notes)
    if not stitched.pipelines:
        notes.append(f"no pipeline span: the policy the trace was recorded under is not known; citations checked against policy v{policy.version}")
    for view in stitched.stages:
        _citations(ledger, view, policy)
    return PolicyCheck(ledger.f.alarms, notes)


def _recorded_under(ledger: Ledger, view: StageView, policy: TransformPolicy, notes: list[str]) -> None:
    recorded, version = view.attributes.get(sc.POLICY_SHA256), view.attributes.get(sc.POLICY_VERSION)
    if recorded is None:
        notes.append(f"recorded under no transform policy: its citations are checked against policy v{policy.version}")
        return
    if recorded != policy.sha256:
        ledger.alarm(
            Where(view.span, view.label),
            sc.POLICY_SHA256,
            f"recorded under another policy (v{version}), not policy v{policy.version}",
            f"sha256 {str(recorded)[:16]}… on the trace, {policy.sha256[:16]}… given",
        )


def _citations(ledger: Ledger, view: StageView, policy: TransformPolicy) -> None:
    component = view.component
    for span, event in view.events():
        rule = event.attributes.get(sc.CANDIDATE_TRANSFORM_RULE)
        if isinstance(rule, str) and rule and not policy.allows(component, rule):
            ledger.alarm(
                Where(span, view.label, str(event.attributes.get(sc.CANDIDATE_ID, ""))),
                sc.CANDIDATE_TRANSFORM_RULE,
                f"cited, but not allowed by policy v{policy.version}",
                f"{rule} is not granted to {component}",
            )
