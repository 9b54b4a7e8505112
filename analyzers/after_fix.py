"""What the other findings weigh once the largest one is fixed.

A problem that costs 1% of a step spent waiting for input costs ten times that share of the step
that is left once the input keeps up: problems are masked by the one upstream of them (seed
000: "Solving one problem surfaced another"). Each finding's share and estimate are of the step
as traced; this projects them onto the step after the top finding's fix.

After an input fix, the step is the rest of the step: the wait goes (all of it, or what the
fix's estimate hides), the other categories keep their proportions, and the cores the input
threads took come back to all of them alike. After another fix, a finding's time is taken as
unchanged, so its share grows by that fix's speedup. Findings read from the same time as the top
one (an input stall beside the input pipeline's finding) are not projected, nor are those whose
fix speeds up all of the step's CPU work alike (a CPU quota, idle cores) (docs/trace-signals.md,
"What comes next").
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
# What an input family's fix removes from the step breakdown: the waits for the next batch, and
# for the GIL a pipeline's Python holds (docs/trace-signals.md, "GIL waits").
INPUT_TIME = ("input_wait", "gil_wait")
# Below this share of the step left, a finding is not worth a line.
MIN_SHARE = 0.005
# Categories of the projected breakdown shown in the text from this share.
MIN_BREAKDOWN_SHARE = 0.01
# Findings whose fix speeds up the step's CPU work as a whole.
WHOLE_CPU = ("cpu_throttling", "cpu_contention", "idle_cores")
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
    # The step breakdown then, when the fix takes a known category away (the input's).
    breakdown: dict[str, float] | None = None

    def to_dict(self) -> dict:
        return {"fixed": self.fixed, "speedup": round(self.speedup, 3),
                "faster_cpu": round(self.faster_cpu, 3),
                "findings": [{"id": p.id, "share": round(p.share, 4),
                              "speedup": round(p.speedup, 3), "severity": p.severity}
                             for p in self.findings],
                "breakdown": None if self.breakdown is None else {
                    k: round(v, 4) for k, v in self.breakdown.items()}}


def _family(fid: str) -> str:
    return _FAMILY_OF.get(fid, fid)


def after_top_fix(findings: list[Finding], fractions: dict[str, float]) -> AfterFix | None:
    """The findings as they would weigh once the one with the largest estimate is fixed, and
    the step breakdown (`fractions`) then when that fix is the input's; None when that fix is
    worth less than a medium finding or nothing else can be projected."""
    if not findings:
        return None
    top = max(findings, key=lambda f: f.speedup)
    if top.speedup < MEDIUM_SPEEDUP or top.severity == "low" or top.id in WHOLE_CPU:
        return None
    faster = max(float(top.numbers.get("contention_slowdown") or 1.0), 1.0)
    breakdown = None
    if _family(top.id) == "input":
        # The step after an input fix is the rest of the step: what it waited for goes (all of
        # it, or what the fix's estimate hides), the rest keeps its proportions, at whatever
        # speed the cores then give it (docs/trace-signals.md, "What comes next"). The
        # estimate's own speedup may be against the untraced step, not this one.
        waited = sum(fractions.get(k, 0.0) for k in INPUT_TIME)
        gone = min(waited, 1.0 - 1.0 / top.speedup)  # under 1: the speedup is finite
        grow = 1.0 / (1.0 - gone)
        breakdown = {k: v * grow for k, v in fractions.items() if k not in INPUT_TIME}
        if gone < waited:  # the wait the fix leaves
            breakdown["input_wait"] = (waited - gone) * grow
    else:
        grow = top.speedup
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
    if not out and not breakdown:
        return None
    out.sort(key=lambda p: -p.speedup)
    return AfterFix(top.id, top.speedup, faster, out, breakdown)


def describe(after: AfterFix) -> str:
    """One line: the other findings' weight in the step that is left."""
    cpu = (f"; the model's ops {after.faster_cpu:.2f}x faster without the input threads beside "
           "them" if after.faster_cpu > 1.0 else "")
    parts = []
    for p in after.findings:
        change = (f"; {p.severity_now} now" if p.severity != p.severity_now else "")
        parts.append(f"{p.id} {p.share:.0%} of the step ({p.speedup:.2f}x: {p.severity}{change})")
    if after.breakdown:
        parts.append("the step then: " + breakdown_text(after.breakdown))
    return (f"after {after.fixed}'s fix (the step {after.speedup:.2f}x shorter{cpu}): "
            + "; ".join(parts))


def breakdown_text(breakdown: dict[str, float]) -> str:
    """A projected breakdown's categories worth showing, largest first (`host_compute 76%, ...`):
    the report's line and the dashboard's."""
    shares = sorted(breakdown.items(), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.0%}" for k, v in shares if v >= MIN_BREAKDOWN_SHARE)
