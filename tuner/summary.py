"""What a study found, as JSON and files: the best configuration (median of its re-measurements),
its speedup over the starting configuration, which finding each improvement came from, parameter
importances, the Pareto front, and the trial table.

Files written to the output folder (each replaced atomically, so an interrupted run never leaves
half a file):
  summary.json       everything below, schema version 1
  best_config.json   the best configuration (`recadvisor train --config best_config.json`)
  best_command.txt   the same as `recadvisor train` flags
  trials.csv         one row per trial (Optuna's trials_dataframe)
"""

from __future__ import annotations

import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from recadvisor.errors import one_line
from reference_model import train_cli
from reference_model.config import TrainConfig
from tuner.storage import redact
from tuner.study import (
    GUIDANCE_ATTR,
    SETUP_ATTR,
    Tuner,
    baseline_trial,
    remeasurements,
    throughput,
)

SCHEMA_VERSION = 1
MIN_TRIALS_FOR_IMPORTANCE = 4


def train_command(config: dict[str, Any]) -> str:
    return train_cli.train_command(TrainConfig.from_dict(config))


def _samples(t: FrozenTrial, extra: dict[int, list[float]]) -> list[float]:
    first = throughput(t)
    return ([first] if first is not None else []) + list(extra.get(t.number, []))


def _stats(values: list[float]) -> dict[str, Any]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values), "values": [round(v, 1) for v in values]}


def _changed(config: dict[str, Any], start: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in config.items() if start.get(k) != v}


def _trial_row(t: FrozenTrial, start: dict[str, Any], extra: dict[int, list[float]]) -> dict:
    dur = t.duration.total_seconds() if t.duration is not None else None
    row = {
        "number": t.number,
        "state": t.state.name,
        "samples_per_s": throughput(t),
        "source": t.user_attrs.get("source", "sampler"),
        "changes_from_start": _changed(t.user_attrs.get("config") or {}, start),
        "duration_s": round(dur, 2) if dur is not None else None,
    }
    for key in ("fail_reason", "duplicate_of", "estimated_speedup", "from_trial", "retry_of"):
        if key in t.user_attrs:
            row[key] = t.user_attrs[key]
    if t.state == TrialState.PRUNED and t.intermediate_values:
        row["last_reported_samples_per_s"] = list(t.intermediate_values.values())[-1]
    if extra.get(t.number):
        row["remeasured"] = [round(v, 1) for v in extra[t.number]]
    return row


def _importances(study: optuna.Study, complete: list[FrozenTrial]) -> dict[str, Any]:
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCE:
        return {"values": None, "reason": f"needs {MIN_TRIALS_FOR_IMPORTANCE} completed trials, "
                f"have {len(complete)}"}
    target = None if len(study.directions) == 1 else (lambda t: t.values[0])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            values = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator(), target=target)
    except (ValueError, RuntimeError, ZeroDivisionError) as e:
        return {"values": None, "reason": one_line(e)}
    return {"values": {k: round(v, 4) for k, v in values.items()}, "evaluator": "PED-ANOVA"}


def _improvements(complete: list[FrozenTrial], base_value: float) -> list[dict[str, Any]]:
    """The trials that set a new best, in the order they ran, and where each came from."""
    out: list[dict[str, Any]] = []
    best = 0.0
    for t in sorted(complete, key=lambda t: t.number):
        v = throughput(t)
        if v is None or v <= best or "duplicate_of" in t.user_attrs:
            continue
        out.append({"trial": t.number, "source": t.user_attrs.get("source", "sampler"),
                    "samples_per_s": round(v, 1), "ratio_to_start": round(v / base_value, 3),
                    "gain_over_previous_best": round(v / best, 3) if best else None})
        best = v
    return out


def _verified(trials: list[FrozenTrial]) -> list[dict[str, Any]]:
    """Each queued remedy: the analyzers' estimate beside the speedup its trial measured."""
    by_number = {t.number: t for t in trials}
    out = []
    for t in trials:
        if not t.user_attrs.get("findings"):
            continue
        src = by_number.get(t.user_attrs.get("from_trial"))
        measured = None
        if src is not None and throughput(t) and throughput(src):
            measured = round(throughput(t) / throughput(src), 3)
        out.append({"trial": t.number, "findings": t.user_attrs["findings"],
                    "from_trial": t.user_attrs.get("from_trial"), "state": t.state.name,
                    "estimated_speedup": t.user_attrs.get("estimated_speedup"),
                    "measured_speedup": measured})
    return out


def build_summary(study: optuna.Study, *, storage_url: str, sampler: str | None = None,
                  wall_s: float | None = None) -> dict[str, Any]:
    """The summary of any recadvisor study (a running tuner's, or one loaded from storage)."""
    setup = study.user_attrs.get(SETUP_ATTR) or {}
    start = setup.get("start_config") or {}
    trials = study.get_trials(deepcopy=False)
    extra = remeasurements(study)
    complete = [t for t in trials if t.state == TrialState.COMPLETE and throughput(t)]
    measured = [t for t in complete if "duplicate_of" not in t.user_attrs]
    counts = {s.name.lower(): sum(t.state == s for t in trials) for s in TrialState}
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "study": study.study_name,
        "storage": redact(storage_url),
        "sampler": sampler or setup.get("sampler"),
        "objectives": setup.get("objectives"),
        "preset": setup.get("preset"),
        "hardware": setup.get("hardware"),
        "space": {"source": setup.get("space", {}).get("source"),
                  "knobs": [k["name"] for k in setup.get("space", {}).get("knobs", [])],
                  "notes": setup.get("space_notes", [])},
        "trial_settings": setup.get("trial_settings"),
        "counts": counts,
        "wall_s": round(wall_s, 1) if wall_s is not None else None,
    }
    base = baseline_trial(study)
    if base is None or base.state != TrialState.COMPLETE:
        out.update(start={"config": start, "samples_per_s": None}, best=None, speedup=None)
    else:
        base_stats = _stats(_samples(base, extra))
        out["start"] = {"trial": base.number, "config": start,
                        "samples_per_s": round(base_stats["median"], 1), "spread": base_stats}
        pool = [t for t in measured if len(_samples(t, extra)) > 1] or measured
        best = max(pool, key=lambda t: statistics.median(_samples(t, extra)))
        best_stats = _stats(_samples(best, extra))
        cfg = best.user_attrs["config"]
        out["best"] = {
            "trial": best.number, "source": best.user_attrs.get("source", "sampler"),
            "samples_per_s": round(best_stats["median"], 1), "spread": best_stats,
            "config": cfg, "changes_from_start": _changed(cfg, start),
            "command": train_command(cfg), "config_file": "best_config.json",
        }
        out["speedup"] = round(best_stats["median"] / base_stats["median"], 3)
        out["improvements"] = _improvements(complete, throughput(base))
    out["guidance"] = (study.user_attrs.get(GUIDANCE_ATTR) or {}).get("rounds", [])
    out["verified_remedies"] = _verified(trials)
    out["importances"] = _importances(study, complete)
    if len(study.directions) > 1:
        front = sorted(study.best_trials, key=lambda t: t.values[1])
        out["pareto_front"] = [{"trial": t.number, "samples_per_s": round(t.values[0], 1),
                                "devices": int(t.values[1]),
                                "command": (train_command(t.user_attrs["config"])
                                            if "config" in t.user_attrs else None)}
                               for t in front]
    out["trials"] = [_trial_row(t, start, extra) for t in trials]
    return out


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def summarize_tuner(tuner: Tuner) -> dict[str, Any]:
    return build_summary(tuner.study, storage_url=tuner.url, sampler=tuner.s.sampler,
                         wall_s=time.time() - tuner.started)


def summarize_storage(storage_url: str, study_name: str | None = None) -> dict[str, Any]:
    """Summarize a study straight from its storage (the only study there when unnamed)."""
    from tuner.storage import open_storage

    storage = open_storage(storage_url)
    names = [st.study_name for st in storage.get_all_studies()]
    if study_name is None:
        if len(names) != 1:
            raise ValueError(f"{redact(storage_url)} holds {len(names)} studies "
                             f"({', '.join(names) or 'none'}): name one")
        study_name = names[0]
    elif study_name not in names:
        raise ValueError(f"no study {study_name!r} in {redact(storage_url)}")
    study = optuna.load_study(study_name=study_name, storage=storage)
    return build_summary(study, storage_url=storage_url)


def write_outputs(out: Path, study: optuna.Study, summary: dict[str, Any]) -> dict[str, Path]:
    paths = {"summary": out / "summary.json"}
    _write(paths["summary"], json.dumps(summary, indent=2, default=str) + "\n")
    if summary.get("best"):
        paths["config"] = out / "best_config.json"
        _write(paths["config"], json.dumps(summary["best"]["config"], indent=2) + "\n")
        paths["command"] = out / "best_command.txt"
        _write(paths["command"], summary["best"]["command"] + "\n")
    value = "values" if len(study.directions) > 1 else "value"
    df = study.trials_dataframe(attrs=("number", "state", value, "duration", "params",
                                       "user_attrs"), multi_index=False)
    if not df.empty:
        paths["trials"] = out / "trials.csv"
        tmp = paths["trials"].with_name("trials.csv.tmp")
        df.to_csv(tmp, index=False)
        tmp.replace(paths["trials"])
    return paths
