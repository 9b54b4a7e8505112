"""Warm-start the search from the analyzers: each finding's remedy becomes a queued trial.

One round = analyze a profiled run of the best configuration so far, queue one trial per medium or
high finding (that finding's fix alone, so the report can say which finding an improvement came
from) and one with every finding's fix together. Seed 000 fixed its job one bottleneck at a time
because "solving one problem surfaced another": the next round profiles the new best and asks
again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyzers.findings import Finding

ACTIONABLE_ALONE = ("high", "medium")


LARGER_BATCH = "larger_batch"  # not a finding: seed 000's last step once the bottlenecks are gone


@dataclass
class Remedy:
    finding_ids: list[str]
    changes: dict[str, Any]
    estimated_speedup: float
    severity: str

    @property
    def source(self) -> str:
        if LARGER_BATCH in self.finding_ids:
            rest = [f for f in self.finding_ids if f != LARGER_BATCH]
            return "seed000:larger_batch" + ("+" + "+".join(rest) if rest else "")
        return "finding:" + "+".join(self.finding_ids)


@dataclass
class RoundPlan:
    analyzed_trial: int
    logdir: str
    findings: list[dict[str, Any]] = field(default_factory=list)
    remedies: list[Remedy] = field(default_factory=list)
    note: str = ""


def _summary(f: Finding) -> dict[str, Any]:
    return {"id": f.id, "severity": f.severity, "estimated_speedup": round(f.speedup, 3),
            "step_fraction": round(f.step_fraction, 4), "title": f.title,
            "changes": dict(f.config_changes)}


def analyze_logdir(logdir: Path) -> list[Finding]:
    """The findings of a profiled run (the analyzers never import TensorFlow)."""
    from analyzers.report import analyze

    report = analyze(logdir)
    if not report.steps_found:
        raise ValueError(f"{logdir}: the profile has no steps to analyze")
    return report.findings


def plan_round(findings: list[Finding], analyzed_trial: int, logdir: str) -> RoundPlan:
    plan = RoundPlan(analyzed_trial=analyzed_trial, logdir=logdir,
                     findings=[_summary(f) for f in findings])
    actionable = sorted((f for f in findings if f.config_changes), key=lambda f: -f.speedup)
    if not actionable:
        plan.note = ("no finding with a configuration change"
                     if findings else "no findings: nothing left for the analyzers to fix")
        return plan
    for f in actionable:
        if f.severity in ACTIONABLE_ALONE:
            plan.remedies.append(Remedy([f.id], dict(f.config_changes), f.speedup, f.severity))
    if len(actionable) > 1 or not plan.remedies:
        merged: dict[str, Any] = {}
        for f in actionable:  # on a conflict the larger estimated gain decides
            for k, v in f.config_changes.items():
                merged.setdefault(k, v)
        combined = 1.0
        for f in actionable:
            combined *= f.speedup
        worst = min(actionable, key=lambda f: ("high", "medium", "low").index(f.severity))
        plan.remedies.append(Remedy([f.id for f in actionable], merged, combined,
                                    worst.severity))
    return plan


def remedy_config(base: Mapping[str, Any], remedy: Remedy) -> dict[str, Any]:
    return {**base, **remedy.changes}


def add_larger_batch(plan: RoundPlan, batch_size: int, allowed: list[int]) -> None:
    """Seed 000: "now that the casting / memory consumption issues were resolved, you can increase
    the batch size to reduce the # of calls between the host and devices". No detector proposes
    it, so it is queued once no finding is medium or high any more: the step is no longer held
    up by a named cause, and fewer, larger steps are what is left. It goes on top of the round's
    remaining (low) remedies."""
    if any(f["severity"] in ACTIONABLE_ALONE for f in plan.findings):
        return
    bigger = [b for b in allowed if b > batch_size]
    if not bigger:
        return
    changes = dict(plan.remedies[-1].changes) if plan.remedies else {}
    ids = list(plan.remedies[-1].finding_ids) if plan.remedies else []
    changes["batch_size"] = min(bigger)
    plan.remedies.append(Remedy([LARGER_BATCH, *ids], changes, 1.0, "low"))
