"""Stop trials that are clearly behind, not trials that are merely below the median.

Throughput on a shared machine varies ±10% between identical runs (see README, Results), and the
good configurations cluster: in a study from `default`, most trials after guidance land within
15% of the best. A percentile pruner then stops contenders; this one stops a trial only when its
running samples/s is below FRACTION of the best any other trial had at the same report.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

FRACTION = 0.75
STARTUP_TRIALS = 4  # completed trials before anything is pruned
WARMUP_REPORTS = 2  # reports a trial makes before it can be pruned (the first ones are noisy)


class BehindBestPruner(optuna.pruners.BasePruner):
    def __init__(self, fraction: float = FRACTION, n_startup_trials: int = STARTUP_TRIALS,
                 n_warmup_steps: int = WARMUP_REPORTS) -> None:
        if not 0 < fraction <= 1:
            raise ValueError("fraction must be in (0, 1]")
        self.fraction = fraction
        self.n_startup_trials = n_startup_trials
        self.n_warmup_steps = n_warmup_steps

    def prune(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step <= self.n_warmup_steps:
            return False
        others = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        if sum(t.state == TrialState.COMPLETE for t in others) < self.n_startup_trials:
            return False
        best = None
        for t in others:
            if not t.intermediate_values:
                continue
            # Another trial's value at this report, or its last one if it reported less often.
            at = [s for s in t.intermediate_values if s <= step]
            v = t.intermediate_values[max(at)] if at else None
            if v is not None and (best is None or v > best):
                best = v
        if best is None:
            return False
        return trial.intermediate_values[step] < self.fraction * best
