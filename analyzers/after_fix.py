"""What the other findings weigh once the largest one is fixed.

A problem that costs 1% of a step spent waiting for input costs ten times that share of the step
that is left once the input keeps up: problems are masked by the one upstream of them (seed
000: "Solving one problem surfaced another"). Each finding's share and estimate are of the step
as traced; this projects them onto the step after the top finding's fix.

The other finding's time is taken as unchanged in absolute terms, so its share grows by the top
fix's speedup, except where that fix also gives the model's work the cores it shared with the
input producers (`input_preprocessing`'s contention slowdown): work on the same cores then runs
that much faster too (docs/trace-signals.md, "Input producers slow the model's ops"). Findings
read from the same time as the top one (an input stall beside the input pipeline's finding) are
not projected, nor are those whose fix speeds up all of the step's CPU work alike (a CPU quota,
idle cores): their share stays what it is, and so does the top fix's effect on them.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.findings import MAX_SAVING, MEDIUM_SPEEDUP, Finding, severity_for

# Findings read from the same time of the step: a fix of one removes what the others count.
FAMILIES = {
    "input": ("io_stall", "input_preprocessing", "queue_input", "duplicated_input",
              "dstate_threads"),
    "dispatch": ("kernel_launch_overhead", "per_step_overhead", "eager_execution",
                 "function_retracing"),
    "exchange": ("collective_overhead", "straggler_worker", "parameter_server_wait"),
    "host_in_step": ("serialized_h2d", "exposed_input_copy", "host_device_pingpong",
                     "embeddings_on_host", "preprocessing_in_step"),
}
# Below this share of the step left, a finding is not worth a line.
MIN_SHARE = 0.005
# Findings whose fix speeds up the step's CPU work as a whole.
WHOLE_CPU = ("cpu_throttling", "idle_cores")
_FAMILY_OF = {fid: family for family, ids in FAMILIES.items() for fid in ids}


@dataclass(frozen=True)
class Projected:
    id: str
    share: float  # of the step after the top fix
    speedup: float  # its own fix's, then
    severity: str
    severity_now: str


@dataclass(frozen=True)
class AfterFix:
    fixed: str  # the top finding's id
    speedup: float  # the top fix's estimate
    faster_cpu: float  # how much faster the remaining CPU work runs (1.0: no change)
    findings: list[Projected]

    def to_dict(self) -> dict:
        return {"fixed": self.fixed, "speedup": round(self.speedup, 3),
                "faster_cpu": round(self.faster_cpu, 3),
                "findings": [{"id": p.id, "share": round(p.share, 4),
                              "speedup": round(p.speedup, 3), "severity": p.severity}
                             for p in self.findings]}


def _family(fid: str) -> str:
    return _FAMILY_OF.get(fid, fid)


def after_top_fix(findings: list[Finding]) -> AfterFix | None:
    """The findings as they would weigh once the one with the largest estimate is fixed, or
    None when that fix is worth less than a medium finding or nothing else can be projected."""
    if len(findings) < 2:
        return None
    top = max(findings, key=lambda f: f.speedup)
    if top.speedup < MEDIUM_SPEEDUP or top.severity == "low" or top.id in WHOLE_CPU:
        return None
    faster = float(top.numbers.get("contention_slowdown") or 1.0)
    grow = top.speedup / max(faster, 1.0)
    out = []
    for f in findings:
        if f is top or f.id in WHOLE_CPU or _family(f.id) == _family(top.id):
            continue
        saved = (1.0 - 1.0 / f.speedup) * grow
        share = f.step_fraction * grow
        if share >= 1.0 or saved >= 1.0:
            continue  # more than the step left: its time is the top fix's too
        if share < MIN_SHARE:
            continue
        speedup = 1.0 / (1.0 - min(saved, MAX_SAVING))
        out.append(Projected(f.id, share, speedup, severity_for(speedup), f.severity))
    if not out:
        return None
    out.sort(key=lambda p: -p.speedup)
    return AfterFix(top.id, top.speedup, max(faster, 1.0), out)


def describe(after: AfterFix) -> str:
    """One line: the other findings' weight in the step that is left."""
    cpu = (f"; the model's ops {after.faster_cpu:.2f}x faster without the input threads beside "
           "them" if after.faster_cpu > 1.0 else "")
    parts = []
    for p in after.findings:
        change = (f"; {p.severity_now} now" if p.severity != p.severity_now else "")
        parts.append(f"{p.id} {p.share:.0%} of the step ({p.speedup:.2f}x: {p.severity}{change})")
    return (f"after {after.fixed}'s fix (the step {after.speedup:.2f}x shorter{cpu}): "
            + "; ".join(parts))
