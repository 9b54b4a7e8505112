"""Run every detector on one profile run and render the result as text, Markdown or JSON.

JSON schema (version 1; documented in docs/analyze-json.md):
{schema_version, run, run_dir, trace_files, hardware{accelerator, devices, cpus, gpus},
 steps{found, source, count, median_ms, untraced_median_ms}, breakdown{<category>: fraction},
 samples_per_s, sampler, findings[{id, title, severity,
 impact{step_fraction, estimated_speedup, estimate_capped},
 evidence{summary, numbers, top_events, time_ranges_ms}, remedy{text, config_changes, command}}],
 after_top_fix{fixed, speedup, faster_cpu, findings[{id, share, speedup, severity}]} | null,
 skipped[{id, reason}], warnings[]}
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from analyzers.after_fix import AfterFix, after_top_fix
from analyzers.after_fix import describe as describe_after_fix
from analyzers.context import Context
from analyzers.detectors import detectors, run_detector
from analyzers.findings import MAX_SAVING, SEVERITIES, Finding, Skipped, speedup_text
from analyzers.ingest.logdir import RunData, gpu_model, load_run
from analyzers.signals.cpu_competition import (
    MIN_INTERVALS,
    cpu_share,
    other_processes,
    others_cores,
)

SCHEMA_VERSION = 1
# Traced against untraced median step time outside these bounds gets a warning: the profiler
# records per event, so it slows most what emits most events (tf.data's per-element work, small
# ops), and the trace's shares overstate those parts (docs/trace-signals.md).
PROFILER_SLOWER = 1.25
PROFILER_FASTER = 0.8
# A window of this many steps or fewer gets a warning: its shares rest on one or two steps, which
# early in training hold one-time work (Keras' TensorBoard callback profiled batch 2 by default:
# 57 real Keras GPU logdirs of one step each, docs/trace-signals.md, "Input copies inside the
# step").
FEW_STEPS = 2
# Other processes using this many cores on average over the steps, the machine full
# (CpuShare.full), get a warning: the job shared its CPUs with them all along (a job alone on 2
# cores saw 0.08-0.14 used by others: the sampler, the capture process).
SHARED_CORES = 0.5


@dataclass
class Report:
    run: RunData
    ctx: Context
    findings: list[Finding] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)

    @property
    def steps_found(self) -> bool:
        return self.ctx.steps.found

    @property
    def after_fix(self) -> AfterFix | None:
        """The other findings in the step left once the largest is fixed (after_fix.py)."""
        return after_top_fix(self.findings, self.ctx.fractions)

    def worst_severity(self) -> str | None:
        for sev in SEVERITIES:
            if any(f.severity == sev for f in self.findings):
                return sev
        return None

    def profiler_warnings(self) -> list[str]:
        untraced = self.ctx.untraced_step_ms
        traced = self.ctx.steps.median_step_ns() / 1e6
        if untraced is None or not self.ctx.steps.found or traced <= 0:
            return []
        ratio = traced / untraced
        if ratio >= PROFILER_SLOWER:
            why = ("the profiler slows most what records most events (tf.data's per-element "
                   "work, small ops), so this trace may overstate their share and the estimates "
                   "built on it")
        elif ratio <= PROFILER_FASTER:
            why = "step times vary between windows, and this one may not be typical of the run"
        else:
            return []
        return [f"the profiled steps took {ratio:.2f}x the untraced median ({traced:.1f} vs "
                f"{untraced:.1f} ms): {why}"]

    def role_warnings(self) -> list[str]:
        """A parameter-server job without steps: say what the trace is and what is missing,
        rather than only "no steps found" (docs/trace-signals.md, "Parameter servers")."""
        ctx = self.ctx
        roles = ctx.host_roles
        workers_steps = ctx.steps.found and "worker" in roles and ctx.step_host not in ctx.ps_hosts
        if not roles or workers_steps:
            return []
        held = ", ".join(f"{n} {job}" for job, n in roles.items())
        return [f"a distributed job's trace ({held}) with no worker's steps in it: a "
                "parameter server's or a coordinator's trace holds no step of its own (TF2: "
                "no step function; TF1: no Session.run through a server, RunGraph); profile "
                "the workers"]

    def machine_warnings(self) -> list[str]:
        """Other processes sharing the machine's CPUs over the whole window (OS sampler): every
        step time and share in the report includes that sharing (docs/trace-signals.md, "Stalls
        the sampler explains"). Not beside `cpu_contention`, which says so with its estimate."""
        ctx = self.ctx
        if not ctx.steps.found or any(f.id == "cpu_contention" for f in self.findings):
            return []
        share = cpu_share(ctx, np.ones(ctx.n_steps, dtype=bool))
        if share is None or share.intervals < MIN_INTERVALS:
            return []
        # The job's own child processes (data loader workers) and the sampler are not others,
        # where the sampler's scans of the processes tell them apart.
        named = other_processes(ctx)
        others = share.others_cores if named is None else others_cores(share, named)
        if others < SHARED_CORES or not share.full:
            return []
        return [f"other processes on the machine used {others:.1f} of its "
                f"{ctx.n_cpus} cores over the steps, and {share.idle_cores:.1f} sat idle (the "
                f"process {share.process_cores:.1f}): every step time here includes sharing "
                "the CPUs with them (other jobs, another process's data loaders, agents); "
                "profile the job where it runs alone to tell its own costs from theirs"]

    def window_warnings(self) -> list[str]:
        n = self.ctx.n_steps
        if not self.ctx.steps.found or n > FEW_STEPS:
            return []
        how = ("torch.profiler.schedule(wait=..., warmup=..., active=10)"
               if self.ctx.framework == "pytorch" else
               "TensorBoard(profile_batch=(100, 110)), or tf.profiler.experimental.start/stop "
               "around 10 steps")
        steps, them = ("one step", "it") if n == 1 else (f"{n} steps", "them")
        return [f"the window holds {steps}: every share and estimate rests on {them}, and a "
                "step this early or this alone can hold one-time work (function tracing, the "
                "input pipeline's start-up); profile 10 or more steps later in training: "
                f"{how}"]

    def to_dict(self) -> dict[str, Any]:
        meta = self.run.metadata or {}
        steps = self.ctx.steps
        untraced = self.ctx.untraced_step_ms
        return {
            "schema_version": SCHEMA_VERSION,
            "run": self.run.name,
            "cycle": None if self.run.cycle is None else dict(
                zip(("chosen", "count"), self.run.cycle, strict=True)),
            "run_dir": str(self.run.run_dir),
            "trace_files": [str(p) for p in self.run.trace_files],
            "hardware": {"accelerator": self.ctx.has_accelerator,
                         "device_planes": self.ctx.device_planes,
                         "hosts": self.ctx.n_hosts, "host_roles": self.ctx.host_roles,
                         "world_size": self.run.world_size,
                         "devices": self.ctx.n_devices,
                         "cpus": self.ctx.n_cpus,
                         **_cpu_limits(self.ctx),
                         "gpus": {name: f"{major}.{minor}"
                                  for name, (major, minor) in sorted(self.run.gpus.items())},
                         "clock_offsets_ms": {h: round(ns / 1e6, 3)
                                              for h, ns in self.run.clock_offsets.items()}},
            "steps": {"found": steps.found, "source": steps.source, "count": len(steps.table),
                      "median_ms": round(steps.median_step_ns() / 1e6, 3),
                      "mean_ms": round(steps.mean_step_ns() / 1e6, 3),
                      **_spread_ms(steps.table["dur_ns"].to_numpy()),
                      "untraced_median_ms": None if untraced is None else round(untraced, 3),
                      "left_out": [{"step": e["step"], "dur_ms": round(e["dur_ns"] / 1e6, 3),
                                    "x_median": e["x_median"], "warmup": e["warmup"]}
                                   for e in steps.left_out]},
            "breakdown": {k: round(v, 4) for k, v in self.ctx.fractions.items()}
            if steps.found else {},
            "samples_per_s": meta.get("samples_per_s"),
            "sampler": self.ctx.sampler_threads is not None,
            "findings": [f.to_dict() for f in self.findings],
            "after_top_fix": None if (after := self.after_fix) is None else after.to_dict(),
            "skipped": [{"id": s.id, "reason": s.reason} for s in self.skipped],
            "warnings": [*self.run.warnings, *self.profiler_warnings(),
                         *self.window_warnings(), *self.role_warnings(),
                         *self.machine_warnings()],
        }


def _fix_command(config: dict[str, Any], changes: dict[str, Any]) -> str | None:
    from reference_model.config import TrainConfig
    from reference_model.train_cli import train_command

    try:
        cfg = TrainConfig.from_dict(config).replace(**changes)
        cfg.validate()
    except (TypeError, ValueError):
        return None
    return train_command(cfg, keep=changes)


def build_report(run: RunData) -> Report:
    ctx = Context.build(run)
    report = Report(run=run, ctx=ctx)
    if not ctx.steps.found:
        return report
    for module in detectors():
        result = run_detector(module, ctx)
        if isinstance(result, Skipped):
            report.skipped.append(result)
        elif isinstance(result, Finding):
            if ctx.config and result.config_changes:
                result.fix_command = _fix_command(ctx.config, result.config_changes)
            report.findings.append(result)
    report.findings.sort(key=lambda f: (SEVERITIES.index(f.severity), -f.speedup))
    return report


def analyze(path: Path, run: str | None = None) -> Report:
    return build_report(load_run(path, run))


def _spread_ms(dur_ns: np.ndarray) -> dict[str, float | None]:
    """How uneven the steps are: the 90th percentile and the longest (step_stalls says why)."""
    if not len(dur_ns):
        return {"p90_ms": None, "max_ms": None}
    return {"p90_ms": round(float(np.percentile(dur_ns, 90)) / 1e6, 3),
            "max_ms": round(float(dur_ns.max()) / 1e6, 3)}


def render_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=json_value)


def json_value(value: object) -> object:
    """numpy scalars as their JSON type (a numpy bool once came out as the string "False");
    anything else JSON lacks, such as paths, as text."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


def _cpu_limits(ctx: Context) -> dict[str, Any]:
    affinity, quota = ctx.cpu_limits
    usable = ctx.usable_cpus
    return {"affinity_cpus": affinity, "cpu_quota": None if quota is None else round(quota, 3),
            "usable_cpus": None if usable is None else round(usable, 3)}


def cpu_limits_text(hw: dict[str, Any]) -> str:
    """What capped the CPUs the process could use, for the report's and the dashboard's
    hardware lines ("affinity 1, CPU quota 0.5: 0.5 usable"); "" when nothing did."""
    cpus, affinity, quota = hw.get("cpus"), hw.get("affinity_cpus"), hw.get("cpu_quota")
    parts = []
    if affinity is not None and (cpus is None or affinity < cpus):
        parts.append(f"affinity {affinity}")
    if quota is not None and quota < (affinity or cpus or float("inf")):
        parts.append(f"CPU quota {quota:g}")
    usable = hw.get("usable_cpus")
    return (", ".join(parts) + (f": {usable:g} usable" if usable is not None else "")
            if parts else "")


def _breakdown_line(fr: dict[str, float]) -> str:
    parts = [f"{k} {v:.0%}" for k, v in sorted(fr.items(), key=lambda kv: -kv[1]) if v >= 0.005]
    return ", ".join(parts)


def render_text(report: Report, markdown: bool = False) -> str:
    d = report.to_dict()
    out: list[str] = []
    h = "## " if markdown else ""
    out.append(f"{h}recadvisor analyze: run {d['run']} ({d['run_dir']})")
    hw = d["hardware"]
    kind = "accelerator " + ", ".join(hw["device_planes"]) if hw["accelerator"] else "CPU only"
    hosts = f", {hw['hosts']} hosts" if hw["hosts"] > 1 else ""
    if (hw.get("world_size") or 0) > 1:  # a PyTorch job's ranks: how many of them the run holds
        hosts = f", {hw['hosts']} of {hw['world_size']} ranks"
    if hw["host_roles"]:
        hosts += " (" + ", ".join(f"{n} {job}" for job, n in hw["host_roles"].items()) + ")"
    models = sorted({f"{gpu_model(name) + ', ' if gpu_model(name) else ''}"
                     f"compute capability {cc}" for name, cc in hw["gpus"].items()})
    if models:
        kind += f" ({'; '.join(models)})"
    limits = cpu_limits_text(hw)
    out.append(f"hardware: {kind}{hosts}"
               f", {hw['devices']} device(s), {hw['cpus'] or '?'} CPUs"
               f"{f' ({limits})' if limits else ''}; "
               f"sampler data: {'yes' if d['sampler'] else 'no'}")
    st = d["steps"]
    if not st["found"]:
        out.append("no steps found: the trace has no step markers (step_num) and no repeated "
                   "train-function calls; nothing to analyze per step")
        out.extend(f"warning: {w}" for w in d["warnings"])
        return "\n".join(out) + "\n"
    where = ("in the profiled window" if (report.run.metadata or {}).get("tool")
             == "recadvisor.capture" else "outside the profiler")
    sps = f", {d['samples_per_s']:,.0f} samples/s ({where})" if d["samples_per_s"] else ""
    untraced = (f"; untraced median {st['untraced_median_ms']:.1f} ms"
                if st["untraced_median_ms"] else "")
    out.append(f"steps: {st['count']} from {st['source']}, median {st['median_ms']:.1f} ms "
               f"(p90 {st['p90_ms']:.1f}, max {st['max_ms']:.1f}){untraced}{sps}")
    if st["left_out"]:
        out.append("left out of every share and estimate: " + "; ".join(
            f"step {e['step']} ({e['dur_ms']:,.1f} ms, {e['x_median']:.1f}x the median: "
            + ("tracing and compilation in it)" if e["warmup"] else
               "a one-time cost at the window's edge, such as a new iterator or the profiler's "
               "start or stop, or a stall that fell there)")
            for e in st["left_out"]))
    out.append(f"step breakdown: {_breakdown_line(d['breakdown'])}")
    out.append("")
    if not report.findings:
        out.append("no findings: nothing in this trace costs a measurable share of step time")
    if markdown and report.findings:
        out.append("| severity | finding | share of step | est. speedup |")
        out.append("|---|---|---|---|")
        for f in report.findings:
            out.append(f"| {f.severity} | `{f.id}`: {f.title} | {f.step_fraction:.0%} | "
                       f"{speedup_text(f.impact())} |")
        out.append("")
    for f in report.findings:
        head = f"[{f.severity.upper()}] {f.id}: {f.title}"
        out.append(("### " if markdown else "") + head)
        out.append(f"  impact: {f.step_fraction:.1%} of step time; estimated speedup if fixed "
                   f"{speedup_text(f.impact())}"
                   + (f" (no fix is credited with more than {MAX_SAVING:.0%} of the step)"
                      if f.capped else ""))
        for e in f.evidence:
            out.append(f"  - {e}")
        if f.top_events:
            tops = "; ".join(_top_event(t) for t in f.top_events[:3])
            out.append(f"  - top events: {tops}")
        out.append(f"  remedy: {f.remedy}")
        if f.fix_command:
            out.append(f"  fix: {('`' + f.fix_command + '`') if markdown else f.fix_command}")
        out.append("")
    after = report.after_fix
    if after is not None:
        out.append(("**next:** " if markdown else "next: ") + describe_after_fix(after))
        out.append("")
    for s in report.skipped:
        out.append(f"not checked: {s.id}: {s.reason}")
    out.extend(f"warning: {w}" for w in d["warnings"])
    return "\n".join(out).rstrip() + "\n"


_NAME_WIDTH = 60


# A kernel signature's trailing parameter list, from a `(` that follows a `>` or a name.
_KERNEL_PARAMS = re.compile(r"(?<=[>\w])\((?:[^()]|\([^()]*\))*\)$")
_NAMESPACES = re.compile(r"\b(?:\w+::)+")


def _top_event(t: dict) -> str:
    name = t["name"]
    if len(name) > _NAME_WIDTH and ("<" in name or name.endswith(")")):
        # A CUDA kernel's name is a C++ signature whose template arguments say what it computes
        # (`AddFunctor<float>`); its return type, namespaces and parameter list (`(int, float*,
        # float const*)`) only fill the width.
        short = _NAMESPACES.sub("", _KERNEL_PARAMS.sub("", name).removeprefix("void "))
        name = short or name
    if len(name) > _NAME_WIDTH:
        # The end of a TF op name is the op and its type (`scope/dense_1/Relu:_MklFusedMatMul`),
        # of a tf.data event its innermost stage: the beginning is the shared scope.
        name = "…" + name[-(_NAME_WIDTH - 1):]
    if "total_ms" in t:
        ms = f"{t['total_ms']:,.3f}".rstrip("0").rstrip(".")
        return f"{name} {ms} ms ({t['count']} event{'s' * (t['count'] != 1)})"
    if "running_share" in t:
        return f"{name} running in {t['running_share']:.0%} of samples"
    return f"{name} {t['d_samples']} samples in D state"


__all__ = ["Report", "analyze", "build_report", "render_json", "render_text"]
