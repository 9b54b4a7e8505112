"""The objective: a trial's params -> a trainer configuration -> steady-state samples/s, measured in
a subprocess. Invalid combinations, crashes, OOM kills and hangs fail the trial with a reason;
below-par intermediate throughput prunes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import TrialState

from reference_model.config import TrainConfig
from tuner.runner import DEFAULT_WORKER, Limits, Outcome, TrialFailed, TrialStopped, run_trial
from tuner.space import SearchSpace

# A multi-objective study: throughput up, devices down (seed 000: 4 GPUs beat 8).
MULTI_OBJECTIVE = ("maximize", "minimize")


@dataclass
class TrialSettings:
    """How each trial measures. Every trial gets the same time, whatever its step time."""

    warmup_steps: int = 5
    measure_seconds: float = 6.0
    max_measure_steps: int = 5000
    report_every_s: float = 1.0
    profile_steps: int = 4
    timeout_s: float = 600.0
    stall_s: float | None = 60.0
    memory_gb: float | None = None

    def limits(self) -> Limits:
        mem = int(self.memory_gb * 2**30) if self.memory_gb else None
        return Limits(timeout_s=self.timeout_s, stall_s=self.stall_s, memory_bytes=mem)


@dataclass
class Measurer:
    """Runs one configuration in a trial subprocess (the objective and the re-measurements)."""

    out: Path
    settings: TrialSettings
    worker: tuple[str, ...] = DEFAULT_WORKER
    data_dir: Path | None = None
    cache_root: Path | None = None
    env: dict[str, str] = field(default_factory=dict)

    def measure(self, config: dict[str, Any], name: str, *, profile_logdir: Path | None = None,
                on_progress=None) -> Outcome:
        s = self.settings
        request = {
            "config": config,
            "warmup_steps": s.warmup_steps,
            "measure_seconds": s.measure_seconds,
            "max_measure_steps": s.max_measure_steps,
            "report_every_s": s.report_every_s,
            "profile_steps": s.profile_steps,
            "logdir": str(profile_logdir) if profile_logdir else None,
            "data_dir": str(self.data_dir) if self.data_dir else None,
            "cache_root": str(self.cache_root) if self.cache_root else None,
        }
        return run_trial(request, workdir=self.out / "trials", name=name, worker=self.worker,
                         limits=s.limits(), on_progress=on_progress, env=self.env)


class Objective:
    def __init__(self, *, start: TrainConfig, space: SearchSpace, measurer: Measurer,
                 worker_id: str, multi_objective: bool = False,
                 max_devices: int | None = None) -> None:
        self.start = start
        self.start_dict = start.to_dict()
        self.space = space
        self.measurer = measurer
        self.worker_id = worker_id
        self.multi_objective = multi_objective
        self.max_devices = max_devices

    def config_for(self, params: dict[str, Any], fixed: dict[str, Any]) -> TrainConfig:
        changes = self.space.config_changes(params, {**self.start_dict, **fixed})
        return TrainConfig.from_dict({**self.start_dict, **fixed, **changes})

    def _values(self, sps: float, cfg: TrainConfig) -> float | tuple[float, float]:
        return (sps, float(cfg.devices)) if self.multi_objective else sps

    def _fail(self, trial: optuna.Trial, reason: str) -> TrialFailed:
        trial.set_user_attr("fail_reason", reason)
        return TrialFailed(reason)

    def _same_config(self, trial: optuna.Trial, cfg: dict[str, Any]):
        # Failed trials are not reused: a timeout, an OOM kill or a killed worker may not recur.
        for t in trial.study.get_trials(deepcopy=False, states=(
                TrialState.COMPLETE, TrialState.PRUNED)):
            if t.user_attrs.get("config") == cfg and "duplicate_of" not in t.user_attrs:
                return t
        return None

    def __call__(self, trial: optuna.Trial) -> float | tuple[float, float]:
        trial.set_user_attr("worker", self.worker_id)
        attrs = trial.user_attrs
        trial.set_user_attr("source", attrs.get("source", "sampler"))
        params = self.space.suggest(trial, self.start_dict)
        fixed = dict(attrs.get("fixed_changes") or {})
        try:
            cfg = self.config_for(params, fixed)
            cfg.validate(max_devices=self.max_devices)
        except (ValueError, TypeError) as e:
            raise self._fail(trial, f"invalid configuration: {e}") from None
        cfg_dict = cfg.to_dict()
        trial.set_user_attr("config", cfg_dict)
        same = self._same_config(trial, cfg_dict)
        if same is not None and not attrs.get("profile"):
            # A categorical space makes samplers propose the same job again: reuse the
            # measurement instead of spending another subprocess on it.
            trial.set_user_attr("duplicate_of", same.number)
            if same.state == TrialState.COMPLETE:
                trial.set_user_attr("samples_per_s", same.user_attrs.get("samples_per_s"))
                return self._values(float(same.user_attrs["samples_per_s"]), cfg)
            raise optuna.TrialPruned(f"same configuration as trial {same.number} (pruned)")
        reports = [0]

        def on_progress(msg: dict[str, Any]) -> bool:
            if self.multi_objective:  # Optuna has no pruning for several objectives
                return False
            reports[0] += 1
            trial.report(float(msg["samples_per_s"]), step=reports[0])
            return trial.should_prune()

        logdir = None
        if attrs.get("profile"):
            logdir = self.measurer.out / "profiles" / f"trial-{trial.number}"
        try:
            outcome = self.measurer.measure(cfg_dict, f"trial-{trial.number:04d}",
                                            profile_logdir=logdir, on_progress=on_progress)
        except TrialStopped:
            raise optuna.TrialPruned(f"pruned after {reports[0]} throughput reports") from None
        except TrialFailed as e:
            raise self._fail(trial, str(e)) from None
        trial.set_user_attr("samples_per_s", outcome.samples_per_s)
        trial.set_user_attr("measured_steps", outcome.result.get("steps"))
        trial.set_user_attr("step_time_ms", outcome.result.get("step_time_ms"))
        trial.set_user_attr("wall_s", round(outcome.wall_s, 2))
        if outcome.result.get("run_dir"):
            trial.set_user_attr("profile_run_dir", outcome.result["run_dir"])
            trial.set_user_attr("profile_logdir", str(logdir))
        return self._values(outcome.samples_per_s, cfg)
