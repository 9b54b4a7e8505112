"""A tuning study from start to summary: set up (or join) the study, measure the starting
configuration, let the findings queue their remedies, let the sampler search the rest, re-measure
the leaders, write the summary.

Everything a worker needs to agree with the others on (start configuration, resolved space,
objectives) is stored in the study itself, so workers on several machines and resumed runs sample
the same space. `--trials N` is the size of the study, shared by all its workers.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, TrialState

from recadvisor.errors import UserError
from reference_model.config import TrainConfig
from tuner import guidance, hardware
from tuner.objective import MULTI_OBJECTIVE, Measurer, Objective, TrialSettings
from tuner.pruning import BehindBestPruner
from tuner.runner import DEFAULT_WORKER, TrialFailed
from tuner.space import SearchSpace
from tuner.storage import (
    alive,
    default_url,
    open_storage,
    recover_dead_trials,
    redact,
    worker_id,
)

SETUP_ATTR = "recadvisor"
GUIDANCE_ATTR = "recadvisor_guidance"
REMEASURE_PREFIX = "recadvisor_remeasure:"
SAMPLERS = ("guided", "tpe", "random", "grid")
DEFAULT_STUDY = "recadvisor-tune"
MAX_GRID = 512
SETUP_WAIT_S = 60  # how long a joining worker waits for the creator to publish the setup
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
# TPE's random start: short on purpose, the budget is ~20 trials of ~15 s each. The same for
# `guided` and `tpe`, so the only difference between them is the findings' queued trials.
TPE_STARTUP_TRIALS = 5


@dataclass
class TuneSettings:
    out: Path
    trials: int
    start: TrainConfig | None = None
    preset: str | None = None
    space_file: Path | None = None
    storage: str | None = None
    study_name: str = DEFAULT_STUDY
    resume: bool = False
    sampler: str = "guided"
    seed: int | None = None
    multi_objective: bool = False
    guide_rounds: int = 3
    remeasure: int = 2
    top_k: int = 3
    trial: TrialSettings = field(default_factory=TrialSettings)
    worker: tuple[str, ...] = DEFAULT_WORKER
    data_dir: Path | None = None
    cache_root: Path | None = None
    env: dict[str, str] = field(default_factory=dict)


Log = Callable[[str], None]


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():  # multivariate/group: "experimental" for years
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True,
                                          n_startup_trials=TPE_STARTUP_TRIALS,
                                          constant_liar=True)


def grid_sampler(space: SearchSpace, seed: int | None) -> optuna.samplers.GridSampler:
    """Every combination of a small categorical space (the study stops when it is exhausted)."""
    numeric = [k.name for k in space.knobs if k.kind != "categorical"]
    if numeric:
        raise UserError(f"--sampler grid needs categorical knobs only; {', '.join(numeric)} "
                        "are ranges")
    grid = {k.name: list(k.choices) for k in space.knobs}
    size = 1
    for choices in grid.values():
        size *= len(choices)
    if size > MAX_GRID:
        raise UserError(f"--sampler grid: the space has {size:,} combinations (limit "
                        f"{MAX_GRID}); narrow it with --space")
    return optuna.samplers.GridSampler(grid, seed=seed)


def make_pruner(multi_objective: bool) -> optuna.pruners.BasePruner:
    if multi_objective:
        return optuna.pruners.NopPruner()
    return BehindBestPruner()


def throughput(t: FrozenTrial) -> float | None:
    v = t.user_attrs.get("samples_per_s")
    return float(v) if isinstance(v, int | float) else None


def baseline_trial(study: optuna.Study) -> FrozenTrial | None:
    for t in study.get_trials(deepcopy=False):
        if t.user_attrs.get("source") == "baseline" and t.state != TrialState.FAIL:
            return t
    return None


def best_complete(study: optuna.Study) -> FrozenTrial | None:
    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if throughput(t) is not None]
    return max(done, key=throughput) if done else None


def _params_of(t: FrozenTrial) -> dict[str, Any]:
    """A trial's params; a queued (WAITING) trial has them only as its fixed params."""
    return t.params or dict(t.system_attrs.get("fixed_params") or {})


def remeasurements(study: optuna.Study) -> dict[int, list[float]]:
    """Extra measurements per trial number, merged over every worker's record."""
    out: dict[int, list[float]] = {}
    for key, per_trial in study.user_attrs.items():
        if key.startswith(REMEASURE_PREFIX):
            for number, values in per_trial.items():
                out.setdefault(int(number), []).extend(values)
    return out


def _frozen_by_data(data_dir: Path | None) -> tuple[dict[str, str], dict[str, Any]]:
    """Knobs a user's --data fixes, and the config values it implies."""
    if data_dir is None:
        return {}, {}
    from reference_model.data.manifest import Manifest

    m = Manifest.load(data_dir)
    why = f"--data {data_dir} holds {m.format}/{m.compression} records"
    frozen = {"record_format": why, "compression": why, "rows_per_record": why}
    return frozen, {"record_format": m.format, "compression": m.compression,
                    "rows_per_record": m.rows_per_record}


class Tuner:
    def __init__(self, s: TuneSettings, log: Log, on_trial: Callable[[FrozenTrial], None]):
        self.s = s
        self.log = log
        self.on_trial = on_trial
        self.me = worker_id()
        self.started = time.time()

    # --- setup -------------------------------------------------------------------------------
    def open(self) -> optuna.Study:
        s = self.s
        s.out.mkdir(parents=True, exist_ok=True)
        self.url = s.storage or default_url(s.out)
        self.storage = open_storage(self.url)
        names = {st.study_name for st in self.storage.get_all_studies()}
        exists = s.study_name in names
        if exists and not s.resume:
            raise UserError(f"study {s.study_name!r} already exists in {redact(self.url)}: pass "
                            "--resume to continue it (or join it from another worker), or "
                            "--study NAME for a new one")
        if not exists and s.start is None:
            raise UserError(f"no study {s.study_name!r} in {redact(self.url)} to resume: give "
                            "--preset NAME or --config FILE to start one")
        self.hw = hardware.detect()
        directions = list(MULTI_OBJECTIVE) if s.multi_objective else ["maximize"]
        sampler, pruner = make_sampler(s.sampler, s.seed), make_pruner(s.multi_objective)
        # Validate the start and the space before creating anything: a bad space file must not
        # leave an empty study behind that the corrected rerun then trips over.
        fresh = self._new_setup() if not exists else None
        created = False
        try:  # creating a study is atomic in the database: exactly one worker creates it
            study = optuna.create_study(storage=self.storage, study_name=s.study_name,
                                        directions=directions, sampler=sampler, pruner=pruner)
            created = True
        except optuna.exceptions.DuplicatedStudyError:
            if not s.resume:
                raise UserError(f"study {s.study_name!r} was just created by another worker: "
                                "pass --resume to join it") from None
            study = optuna.load_study(study_name=s.study_name, storage=self.storage,
                                      sampler=sampler, pruner=pruner)
        if (len(study.directions) > 1) != s.multi_objective:
            kind = "multi-objective" if len(study.directions) > 1 else "single-objective"
            raise UserError(f"study {s.study_name!r} is {kind}: "
                            f"{'add' if kind[0] == 'm' else 'drop'} --multi-objective")
        if created:
            setup = fresh or self._new_setup()
            space = SearchSpace.from_dict(setup["space"])
            params, notes = space.params_for(setup["start_config"])
            # The baseline is queued before the setup is published: a worker that sees the
            # setup sees the baseline too, and only the creator ever queues one.
            study.enqueue_trial(params, user_attrs={
                "source": "baseline", "profile": s.sampler == "guided", "notes": notes})
            study.set_user_attr(SETUP_ATTR, setup)
        else:
            setup = self._wait_for_setup(study)
            if s.start is not None and setup["start_config"] != s.start.replace(
                    **_frozen_by_data(s.data_dir)[1]).to_dict():
                raise UserError(f"study {s.study_name!r} was started from a different "
                                "configuration; resume it without --preset/--config, or use "
                                "--study NAME")
        self.setup = setup
        self.start = TrainConfig.from_dict(setup["start_config"])
        self.space = SearchSpace.from_dict(setup["space"])
        if s.sampler == "grid":  # exhaustive: no pruning either
            study.sampler = grid_sampler(self.space, s.seed)
            study.pruner = optuna.pruners.NopPruner()
        gpus = self.hw.count if self.hw.accelerator == "GPU" else None
        self.measurer = Measurer(out=s.out, settings=s.trial, worker=tuple(s.worker),
                                 data_dir=s.data_dir, cache_root=s.cache_root, env=s.env)
        self.objective = Objective(start=self.start, space=self.space, measurer=self.measurer,
                                   worker_id=self.me, multi_objective=s.multi_objective,
                                   max_devices=gpus)
        self.study = study
        for n in recover_dead_trials(study, self.storage):
            self.log(f"trial {n} was running in a worker that died: failed and queued again")
        return study

    def _wait_for_setup(self, study: optuna.Study) -> dict[str, Any]:
        deadline = time.monotonic() + SETUP_WAIT_S
        while True:
            setup = study.user_attrs.get(SETUP_ATTR)
            if setup is not None:
                return setup
            if time.monotonic() > deadline:
                raise UserError(f"study {study.study_name!r} has no recadvisor setup (was it "
                                "created by another tool, or did its first worker die while "
                                "setting it up?): use another --study")
            time.sleep(0.5)

    def _new_setup(self) -> dict[str, Any]:
        s = self.s
        assert s.start is not None
        frozen, implied = _frozen_by_data(s.data_dir)
        start = s.start.replace(**implied)
        start.validate()
        if start.input_loading == "per_device":
            frozen = {**frozen, "steps_per_call": "a pipeline per device (--input-loading "
                      "per_device) is fetched in Python, one batch a call"}
        space, notes = SearchSpace.load(s.space_file).resolve(
            start, accelerator=self.hw.accelerator, accelerator_count=self.hw.count,
            frozen=frozen)
        for n in notes:
            self.log(f"space: {n}")
        return {
            "version": 1,
            "preset": s.preset,
            "start_config": start.to_dict(),
            "space": space.to_dict(),
            "space_notes": notes,
            "hardware": dataclasses.asdict(self.hw),
            "sampler": s.sampler,
            "objectives": ["samples_per_s", "devices"] if s.multi_objective
            else ["samples_per_s"],
            "trial_settings": dataclasses.asdict(s.trial),
            "created_by": self.me,
        }

    # --- running trials ------------------------------------------------------------------------
    def finished(self) -> int:
        return len(self.study.get_trials(deepcopy=False, states=FINISHED))

    def optimize(self, n: int | None = None) -> None:
        left = self.s.trials - self.finished()
        n = left if n is None else min(n, left)
        if n <= 0:
            return
        self.study.optimize(
            self.objective, n_trials=n, catch=(TrialFailed,),
            callbacks=[MaxTrialsCallback(self.s.trials, states=FINISHED),
                       lambda _study, t: self.on_trial(t)],
        )

    def run(self) -> None:
        if not self._baseline_done():
            self.optimize(1)  # the queued baseline, unless another worker already took it
        base = baseline_trial(self.study)
        if base is None:
            failed = [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                      if t.user_attrs.get("source") == "baseline"]
            reason = failed[-1].user_attrs.get("fail_reason", "?") if failed else "not queued"
            raise UserError(f"the starting configuration failed: {reason}")
        if self.s.sampler == "guided":
            self.guide()
        self.optimize()

    def _baseline_done(self) -> bool:
        base = baseline_trial(self.study)
        return base is not None and base.state == TrialState.COMPLETE

    # --- guidance ------------------------------------------------------------------------------
    def guide(self) -> None:
        state = self.study.user_attrs.get(GUIDANCE_ATTR) or {"rounds": []}
        base = baseline_trial(self.study)
        owner = state.get("owner") or (base.user_attrs.get("worker") if base else None)
        if owner != self.me and owner is not None and alive(owner) is not False:
            return  # the worker that measured the baseline guides; the others sample
        state["owner"] = self.me
        for r in range(len(state["rounds"]), self.s.guide_rounds):
            if self.finished() >= self.s.trials:
                return
            target = best_complete(self.study)
            if target is None:
                return
            if target.number in {rd["analyzed_trial"] for rd in state["rounds"]}:
                self.log("guidance: no new best since the last analysis; the sampler goes on")
                return
            plan = self._analyze(target, r)
            if plan is None:
                return
            queued = self._enqueue(plan, target, r)
            state["rounds"].append({**dataclasses.asdict(plan), "round": r, "queued": queued})
            self.study.set_user_attr(GUIDANCE_ATTR, state)
            if not queued:
                self.log(f"guidance round {r + 1}: {plan.note or 'every remedy already tried'}")
                return
            self.optimize(len(queued))

    def _analyze(self, target: FrozenTrial, r: int) -> guidance.RoundPlan | None:
        logdir = target.user_attrs.get("profile_logdir")
        if not logdir:
            self.log(f"guidance round {r + 1}: profiling trial {target.number} "
                     f"({throughput(target):,.0f} samples/s)")
            logdir = self.s.out / "profiles" / f"trial-{target.number}"
            try:
                outcome = self.measurer.measure(target.user_attrs["config"],
                                                f"profile-trial-{target.number:04d}",
                                                profile_logdir=logdir)
            except TrialFailed as e:
                self.log(f"guidance: profiling trial {target.number} failed: {e}")
                return None
            self._add_remeasure(target.number, outcome.samples_per_s)
        try:
            findings = guidance.analyze_logdir(Path(logdir))
        except (ValueError, OSError) as e:
            self.log(f"guidance: cannot analyze {logdir}: {e}")
            return None
        plan = guidance.plan_round(findings, target.number, str(logdir))
        batch = next((k for k in self.space.knobs if k.name == "batch_size"), None)
        if batch is not None and batch.kind == "categorical":
            guidance.add_larger_batch(plan, int(target.user_attrs["config"]["batch_size"]),
                                      sorted(int(c) for c in batch.choices))
        shown = ", ".join(f"{f['id']} ({f['severity']}, est. {f['estimated_speedup']:.2f}x)"
                          for f in plan.findings) or "none"
        self.log(f"guidance round {r + 1}: trial {target.number} findings: {shown}")
        return plan

    def _enqueue(self, plan: guidance.RoundPlan, target: FrozenTrial, r: int) -> list[dict]:
        names = set(self.space.names())
        base_cfg = target.user_attrs["config"]
        base_fixed = dict(target.user_attrs.get("fixed_changes") or {})
        tried = [(_params_of(t), t.user_attrs.get("fixed_changes") or {})
                 for t in self.study.get_trials(deepcopy=False)]
        queued = []
        for remedy in plan.remedies:
            cfg = guidance.remedy_config(base_cfg, remedy)
            fixed = {**base_fixed, **{k: v for k, v in remedy.changes.items() if k not in names}}
            params, notes = self.space.params_for(cfg)
            if (params, fixed) in tried:
                continue
            tried.append((params, fixed))
            source = remedy.source
            self.study.enqueue_trial(params, user_attrs={
                "source": source, "round": r,
                "findings": [f for f in remedy.finding_ids if f != guidance.LARGER_BATCH],
                "from_trial": target.number, "estimated_speedup": round(
                    remedy.estimated_speedup, 3), "fixed_changes": fixed, "notes": notes})
            queued.append({"findings": remedy.finding_ids, "changes": remedy.changes})
            diff = {k: v for k, v in remedy.changes.items() if base_cfg.get(k) != v}
            self.log(f"  queued: {source}: " + ", ".join(f"{k}={v}" for k, v in diff.items()))
        return queued

    # --- noise ---------------------------------------------------------------------------------
    def _add_remeasure(self, number: int, value: float) -> None:
        key = REMEASURE_PREFIX + self.me
        mine = dict(self.study.user_attrs.get(key) or {})
        mine.setdefault(str(number), []).append(value)
        self.study.set_user_attr(key, mine)

    def remeasure_leaders(self) -> None:
        """Measure the top configurations (and the baseline) again: one measurement on a noisy
        2-core machine can be ±10%, enough to crown the wrong trial."""
        if self.s.remeasure <= 0:
            return
        seen: set[str] = set()
        leaders: list[FrozenTrial] = []
        done = sorted((t for t in self.study.get_trials(deepcopy=False,
                                                        states=(TrialState.COMPLETE,))
                       if throughput(t) and "duplicate_of" not in t.user_attrs),
                      key=lambda t: -throughput(t))
        for t in done:
            key = repr(sorted(t.user_attrs["config"].items()))
            if key not in seen:
                seen.add(key)
                leaders.append(t)
            if len(leaders) == self.s.top_k:
                break
        base = baseline_trial(self.study)
        if base is not None and base.state == TrialState.COMPLETE and base not in leaders:
            leaders.append(base)
        have = remeasurements(self.study)
        for t in leaders:
            for i in range(len(have.get(t.number, [])), self.s.remeasure):
                try:
                    o = self.measurer.measure(t.user_attrs["config"],
                                              f"remeasure-trial-{t.number:04d}-{i}")
                except TrialFailed as e:
                    self.log(f"re-measuring trial {t.number} failed: {e}")
                    break
                self._add_remeasure(t.number, o.samples_per_s)
                self.log(f"re-measured trial {t.number}: {o.samples_per_s:,.0f} samples/s")


def run_tune(s: TuneSettings, log: Log, on_trial: Callable[[FrozenTrial], None],
             on_open: Callable[[Tuner], None] | None = None) -> Tuner:
    """Open the study, run it and re-measure the leaders. `on_open(tuner)` is called once the
    study exists (the CLI logs it and keeps the tuner for a summary if interrupted)."""
    if s.sampler not in SAMPLERS:
        raise UserError(f"--sampler must be one of {', '.join(SAMPLERS)}")
    if s.trials < 1:
        raise UserError("--trials must be at least 1")
    tuner = Tuner(s, log, on_trial)
    tuner.open()
    if on_open is not None:
        on_open(tuner)
    tuner.run()
    tuner.remeasure_leaders()
    return tuner
