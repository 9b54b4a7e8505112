"""Compare two reports: step breakdowns side by side, findings resolved and new, speedup.

Speedup prefers the runs' own throughput (samples/s measured outside the profiler, from the run
metadata); without it, the ratio of mean step times in the traces (one-time first or last steps
are already out of the steps: steps.EDGE_OUTLIER), which the profiler inflates for small steps
(said in the output). The mean, not the median: a fix that removes a stall every few steps (a
checkpoint, a garbage collection) leaves the median step as it was. Windows under 5 steps keep
their edges, so two of them compare as they are.
"""

from __future__ import annotations

from typing import Any

from analyzers.findings import speedup_text
from analyzers.report import Report
from analyzers.steps import ALL_CATEGORIES


def diff_reports(a: Report, b: Report) -> dict[str, Any]:
    da, db = a.to_dict(), b.to_dict()
    ids_a = {f["id"]: f for f in da["findings"]}
    ids_b = {f["id"]: f for f in db["findings"]}
    sa, sb = da["samples_per_s"], db["samples_per_s"]
    if sa and sb:
        speedup, basis = sb / sa, "samples/s from run metadata"
    else:
        mean_a, mean_b = da["steps"]["mean_ms"], db["steps"]["mean_ms"]
        speedup = mean_a / mean_b if mean_a and mean_b else None
        basis = "mean step time in the traces"
    ma, mb = da["steps"]["median_ms"], db["steps"]["median_ms"]
    dev_a, dev_b = da["hardware"]["devices"], db["hardware"]["devices"]
    scaling = (round(speedup / (dev_b / dev_a), 3)
               if speedup and dev_a and dev_b and dev_a != dev_b else None)
    resolved = [{"id": i, "severity": f["severity"],
                 "estimated_speedup": f["impact"]["estimated_speedup"],
                 "estimate_capped": bool(f["impact"].get("estimate_capped"))}
                for i, f in ids_a.items() if i not in ids_b]
    # The before report's projection of the step after its top fix, when that fix is what the
    # after run made (analyzers/after_fix.py): the breakdown it projected beside what was read.
    after_fix = da.get("after_top_fix")
    projected = (after_fix["breakdown"] if after_fix and after_fix.get("breakdown")
                 and after_fix["fixed"] in {r["id"] for r in resolved} else None)
    return {
        "before": {"run": da["run"], "cycle": da["cycle"], "run_dir": da["run_dir"],
                   "samples_per_s": sa,
                   "median_step_ms": ma, "mean_step_ms": da["steps"]["mean_ms"]},
        "after": {"run": db["run"], "cycle": db["cycle"], "run_dir": db["run_dir"],
                  "samples_per_s": sb,
                  "median_step_ms": mb, "mean_step_ms": db["steps"]["mean_ms"]},
        "speedup": round(speedup, 3) if speedup else None,
        "speedup_basis": basis,
        "devices": {"before": dev_a, "after": dev_b},
        "scaling_efficiency": scaling,  # speedup / device ratio, when the counts differ
        # ms per step: the shares (of all step time, stalls included) of the mean step.
        "breakdown": {c: {"before": da["breakdown"].get(c, 0.0),
                          "after": db["breakdown"].get(c, 0.0),
                          "projected": None if projected is None else projected.get(c, 0.0),
                          "before_ms": round(da["breakdown"].get(c, 0.0)
                                             * da["steps"]["mean_ms"], 3),
                          "after_ms": round(db["breakdown"].get(c, 0.0)
                                            * db["steps"]["mean_ms"], 3)}
                      for c in ALL_CATEGORIES},
        "resolved": resolved,
        "projected_after": None if projected is None else after_fix["fixed"],
        "new": [{"id": i, "severity": f["severity"]} for i, f in ids_b.items() if i not in ids_a],
        "remaining": [_remaining(ids_a[i], ids_b[i]) for i in ids_a if i in ids_b],
    }


def _remaining(fa: dict[str, Any], fb: dict[str, Any]) -> dict[str, Any]:
    """A finding in both reports: its severity and estimate each side, and, for findings that
    name causes (input_preprocessing), which causes the change removed and which it brought:
    a fix of one cause leaves the finding standing on the others."""
    out = {"id": fa["id"], "before": fa["severity"], "after": fb["severity"],
           "speedup_before": fa["impact"]["estimated_speedup"],
           "speedup_after": fb["impact"]["estimated_speedup"]}
    ca = fa["evidence"]["numbers"].get("causes")
    cb = fb["evidence"]["numbers"].get("causes")
    if ca is not None or cb is not None:
        out["causes_resolved"] = sorted(set(ca or ()) - set(cb or ()))
        out["causes_new"] = sorted(set(cb or ()) - set(ca or ()))
    return out


def remaining_text(x: dict[str, Any]) -> str:
    """A remaining finding's change: severities, estimates, causes removed and brought."""
    parts = [f"{x['before']} -> {x['after']}",
             f"est. {x['speedup_before']:.2f}x -> {x['speedup_after']:.2f}x"]
    for key, label in (("causes_resolved", "resolved"), ("causes_new", "new")):
        if x.get(key):
            parts.append(f"{label}: {', '.join(c.replace('_', ' ') for c in x[key])}")
    return "; ".join(parts)


def resolved_text(x: dict[str, Any], speedup: float | None, n_resolved: int) -> str:
    """A resolved finding with its estimate; set against the measured speedup when it is the
    only one resolved (several fixes' estimates do not add up to one)."""
    est = x.get("estimated_speedup")
    if est is None:  # a report written before the key existed
        return f"{x['id']} ({x['severity']})"
    text = f"{x['id']} ({x['severity']}; est. {speedup_text(x)}"
    if speedup and n_resolved == 1:
        text += f", measured {speedup:.2f}x: {est / speedup - 1:+.0%}"
    return text + ")"


def _label(side: dict[str, Any]) -> str:
    c = side.get("cycle")
    return side["run"] if not c else f"{side['run']} (cycle {c['chosen']} of {c['count']})"


def render_diff(d: dict[str, Any], markdown: bool = False) -> str:
    out = []
    b, a = d["before"], d["after"]
    sp = f"{d['speedup']:.2f}x" if d["speedup"] else "n/a"
    out.append(f"before: {_label(b)}  after: {_label(a)}  speedup {sp} "
               f"({d['speedup_basis']})")
    if d.get("scaling_efficiency") is not None:
        dv = d["devices"]
        out.append(f"devices {dv['before']} -> {dv['after']}: scaling efficiency "
                   f"{d['scaling_efficiency']:.0%}")
    out.append("")
    fixed = d.get("projected_after")
    if markdown:
        out.append("| category | before ms | after ms | before % | after % |"
                   + (" projected % |" if fixed else ""))
        out.append("|---|---|---|---|---|" + ("---|" if fixed else ""))
    else:
        out.append(f"{'category':16s} {'before ms':>10s} {'after ms':>10s} {'before':>7s} "
                   f"{'after':>7s}" + (f" {'projected':>9s}" if fixed else ""))
    for c, v in d["breakdown"].items():
        if max(v["before"], v["after"], v.get("projected") or 0.0) < 0.005:
            continue
        proj = v.get("projected")
        if markdown:
            out.append(f"| {c} | {v['before_ms']:.1f} | {v['after_ms']:.1f} | "
                       f"{v['before']:.0%} | {v['after']:.0%} |"
                       + (f" {proj:.0%} |" if fixed else ""))
        else:
            out.append(f"{c:16s} {v['before_ms']:10.1f} {v['after_ms']:10.1f} "
                       f"{v['before']:7.0%} {v['after']:7.0%}"
                       + (f" {proj:9.0%}" if fixed else ""))
    if fixed:
        out.append(f"(projected: the before run's `next:` for the step after {fixed}'s fix)")
    out.append("")
    out.append("resolved: " + (", ".join(resolved_text(x, d["speedup"], len(d["resolved"]))
                                         for x in d["resolved"]) or "none"))
    items = ", ".join(f"{x['id']} ({x['severity']})" for x in d["new"]) or "none"
    out.append(f"new: {items}")
    rem = ", ".join(f"{x['id']} ({remaining_text(x)})" for x in d["remaining"])
    out.append(f"remaining: {rem or 'none'}")
    return "\n".join(out) + "\n"
