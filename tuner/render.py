"""Text for the terminal: one line per finished trial, and the study's summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from optuna.trial import FrozenTrial


def trial_line(t: FrozenTrial, base: float | None) -> str:
    from tuner.study import throughput

    v = throughput(t)
    src = t.user_attrs.get("source", "sampler")
    dur = f"{t.duration.total_seconds():.0f} s" if t.duration is not None else ""
    if t.state.name == "COMPLETE" and v is not None:
        ratio = f" ({v / base:.2f}x start)" if base else ""
        dup = (f", same as trial {t.user_attrs['duplicate_of']}"
               if "duplicate_of" in t.user_attrs else "")
        what = f"{v:,.0f} samples/s{ratio}{dup}"
    elif t.state.name == "PRUNED":
        last = list(t.intermediate_values.values())[-1] if t.intermediate_values else None
        what = "pruned" + (f" at {last:,.0f} samples/s" if last else "")
    else:
        what = f"{t.state.name.lower()}: {t.user_attrs.get('fail_reason', '?')}"
    return f"trial {t.number:3d} [{src}] {what} {dur}".rstrip()


def _row(cells: list[str], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def render_summary(s: dict[str, Any], paths: dict[str, Path]) -> str:
    out: list[str] = [""]
    c = s["counts"]
    out.append(f"study {s['study']}: {c.get('complete', 0)} complete, {c.get('pruned', 0)} "
               f"pruned, {c.get('fail', 0)} failed, {s['wall_s']:.0f} s")
    if not s.get("best"):
        out.append("no completed measurement of the starting configuration yet: no speedup")
    else:
        st, b = s["start"], s["best"]
        sp = b["spread"]
        out.append(f"start:  {st['samples_per_s']:,.0f} samples/s (trial {st['trial']}, median of "
                   f"{st['spread']['n']})")
        out.append(f"best:   {b['samples_per_s']:,.0f} samples/s (trial {b['trial']}, "
                   f"{b['source']}; median of {sp['n']}, {sp['min']:,.0f}-{sp['max']:,.0f})")
        out.append(f"speedup over the starting configuration: {s['speedup']:.2f}x")
        if b["changes_from_start"]:
            out.append("changes: " + ", ".join(f"{k}={v}" for k, v in
                                               b["changes_from_start"].items()))
        if s.get("improvements"):
            out.append("")
            out.append("where the improvements came from:")
            widths = [6, 44, 12, 10]
            out.append("  " + _row(["trial", "source", "samples/s", "vs start"], widths))
            for imp in s["improvements"]:
                out.append("  " + _row([str(imp["trial"]), imp["source"][:44],
                                        f"{imp['samples_per_s']:,.0f}",
                                        f"{imp['ratio_to_start']:.2f}x"], widths))
        ver = [v for v in s.get("verified_remedies", []) if v["measured_speedup"]]
        if ver:
            out.append("")
            out.append("findings' remedies, estimated vs measured:")
            for v in ver:
                out.append(f"  trial {v['trial']}: {'+'.join(v['findings'])}: est. "
                           f"{v['estimated_speedup']:.2f}x, measured {v['measured_speedup']:.2f}x"
                           f" (vs trial {v['from_trial']})")
    imp = s.get("importances") or {}
    if imp.get("values"):
        top = sorted(imp["values"].items(), key=lambda kv: -kv[1])[:6]
        out.append("")
        out.append("parameter importances: " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    if s.get("pareto_front"):
        out.append("")
        out.append("Pareto front (samples/s vs devices):")
        for p in s["pareto_front"]:
            out.append(f"  {p['devices']} device(s): {p['samples_per_s']:,.0f} samples/s "
                       f"(trial {p['trial']})")
    if s.get("best"):
        out.append("")
        out.append("run the best configuration:")
        out.append(f"  {s['best']['command']}")
        if "config" in paths:
            out.append(f"  (or: recadvisor train --config {paths['config']})")
    out.append("")
    out.append(f"written: {', '.join(str(p) for p in paths.values())}")
    return "\n".join(out) + "\n"
