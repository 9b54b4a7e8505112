"""The pruner stops trials clearly behind the best, not contenders within the machine's noise."""

import optuna
import pytest

from tuner.pruning import BehindBestPruner


def _study(finished_rates):
    study = optuna.create_study(direction="maximize", pruner=BehindBestPruner(
        fraction=0.75, n_startup_trials=2, n_warmup_steps=2))
    for rate in finished_rates:
        t = study.ask()
        for step in range(1, 6):
            t.report(rate, step)
        study.tell(t, rate)
    return study


def _prunes(study, rates):
    t = study.ask()
    for step, rate in enumerate(rates, start=1):
        t.report(rate, step)
    return t.should_prune()


def test_behind_best_is_pruned_after_the_warmup_reports():
    study = _study([100.0, 60.0])
    assert not _prunes(study, [50.0])  # first report: too early to judge
    assert not _prunes(study, [50.0, 50.0])
    assert _prunes(study, [50.0, 50.0, 50.0])


def test_contenders_within_noise_are_kept():
    study = _study([100.0, 95.0, 90.0])
    assert not _prunes(study, [80.0, 80.0, 80.0])  # below the median, within 25% of the best
    assert _prunes(study, [70.0, 70.0, 70.0])


def test_nothing_is_pruned_before_the_startup_trials():
    study = _study([100.0])
    assert not _prunes(study, [10.0, 10.0, 10.0, 10.0])


def test_other_trials_reporting_less_often_count_with_their_last_value():
    study = _study([100.0, 100.0])
    assert _prunes(study, [1.0] * 9)


def test_fraction_must_be_a_fraction():
    with pytest.raises(ValueError):
        BehindBestPruner(fraction=1.5)
