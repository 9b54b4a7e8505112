"""The search space: an editable TOML file of trainer knobs, resolved once per study.

A space file names TrainConfig fields; `resolve` fits it to one study (the starting
configuration's values join each knob's choices so the baseline trial is exactly the starting job;
GPU-only knobs go on CPU hosts; device counts above the GPUs present go) and the resolved space is
stored with the study, so every worker and every resumed run samples the same distributions.
The format is documented at the top of `tuner/spaces/default.toml`.
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)

from reference_model.config import AT_MOST, AUTOTUNE, RUN_LENGTH_FIELDS, TrainConfig

DEFAULT_SPACE = Path(__file__).with_name("spaces") / "default.toml"
KINDS = ("categorical", "int", "float")
# Knobs that say how long to run, not how to train: tuning them would only game the measurement.
NOT_TUNABLE = frozenset(RUN_LENGTH_FIELDS)
ACCELERATOR_KEY = "accelerator"
_KEYS = {"type", "choices", "low", "high", "step", "log", "when", "otherwise", "at_most", "limit"}
_FIELD_DEFAULTS = {f.name: getattr(TrainConfig(), f.name) for f in dataclasses.fields(TrainConfig)}


def _field_type(name: str) -> type:
    default = _FIELD_DEFAULTS[name]
    if default is None:  # cardinalities: a tuple of ints when set
        return tuple
    return type(default)


def _encode(name: str, value: Any) -> Any:
    """Optuna's categorical choices must be scalars: tuple-valued knobs travel as 'a,b,c'."""
    if _field_type(name) is tuple and value is not None:
        return ",".join(str(int(v)) for v in value)
    return value


def decode(name: str, value: Any) -> Any:
    if _field_type(name) is tuple and isinstance(value, str):
        return tuple(int(v) for v in value.split(",") if v)
    return value


def _coerce(name: str, value: Any, where: str) -> Any:
    t = _field_type(name)
    ok = (
        (t is bool and isinstance(value, bool))
        or (t is int and isinstance(value, int) and not isinstance(value, bool))
        or (t is float and isinstance(value, int | float) and not isinstance(value, bool))
        or (t is str and isinstance(value, str))
        or (t is tuple and isinstance(value, list) and all(isinstance(v, int) for v in value))
    )
    if not ok:
        raise ValueError(f"{where}: {value!r} is not a valid value for {name} ({t.__name__})")
    if t is float:
        return float(value)
    if t is tuple:
        return _encode(name, tuple(value))
    return value


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str = "categorical"
    choices: tuple[Any, ...] = ()
    low: float | None = None
    high: float | None = None
    step: float | None = None
    log: bool = False
    when: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    otherwise: Any = None  # the value when `when` does not hold (None: the starting value)
    at_most: str | None = None
    limit: str | None = None

    def distribution(self) -> BaseDistribution:
        if self.kind == "categorical":
            return CategoricalDistribution(self.choices)
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), log=self.log,
                                   step=int(self.step or 1))
        return FloatDistribution(self.low, self.high, log=self.log, step=self.step)

    def contains(self, value: Any) -> bool:
        value = _encode(self.name, value)
        if self.kind == "categorical":
            return value in self.choices
        try:
            return self.distribution()._contains(self.distribution().to_internal_repr(value))
        except (TypeError, ValueError):
            return False

    def with_value(self, value: Any) -> Knob:
        """This knob widened so that `value` is one of its values."""
        value = _encode(self.name, value)
        if self.contains(value):
            return self
        if self.kind == "categorical":
            return dataclasses.replace(self, choices=(value, *self.choices))
        low, high = min(self.low, value), max(self.high, value)
        if self.step and (value - low) % self.step:
            return self  # off the step grid: the value is still used, Optuna only warns
        return dataclasses.replace(self, low=low, high=high)

    def snap(self, value: Any) -> Any:
        """`value`, or the nearest value this knob allows (None when nothing is near: a string
        the choices lack). AUTOTUNE is only ever matched by AUTOTUNE."""
        enc = _encode(self.name, value)
        if self.contains(enc):
            return enc
        numeric = isinstance(enc, int | float) and not isinstance(enc, bool)
        if not numeric or enc == AUTOTUNE:
            return None
        if self.kind != "categorical":
            v = min(max(enc, self.low), self.high)
            return int(v) if self.kind == "int" else float(v)
        near = [c for c in self.choices
                if isinstance(c, int | float) and not isinstance(c, bool) and c != AUTOTUNE]
        return min(near, key=lambda c: (abs(c - enc), -c)) if near else None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["choices"] = list(self.choices)
        d["when"] = {k: list(v) for k, v in self.when.items()}
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Knob:
        d = dict(d)
        d["choices"] = tuple(d.get("choices", ()))
        d["when"] = {k: tuple(v) for k, v in d.get("when", {}).items()}
        return cls(**d)


def _knob(name: str, spec: Any, where: str, earlier: set[str]) -> Knob:
    if name not in _FIELD_DEFAULTS:
        raise ValueError(f"{where}: {name!r} is not a trainer knob (see `recadvisor train --help`)")
    if name in NOT_TUNABLE:
        raise ValueError(f"{where}: {name} sets the run length and cannot be tuned")
    if not isinstance(spec, dict):
        raise ValueError(f"{where}: expected a table of settings")
    unknown = sorted(set(spec) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {', '.join(unknown)}")
    kind = spec.get("type", "categorical")
    if kind not in KINDS:
        raise ValueError(f"{where}: type must be one of {', '.join(KINDS)}, not {kind!r}")
    knob: dict[str, Any] = {"name": name, "kind": kind}
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ValueError(f"{where}: a categorical knob needs a non-empty list `choices`")
        coerced = [_coerce(name, c, where) for c in choices]
        knob["choices"] = tuple(dict.fromkeys(coerced))
    else:
        if _field_type(name) not in (int, float):
            raise ValueError(f"{where}: {name} is not numeric; use type = \"categorical\"")
        if kind == "int" and _field_type(name) is not int:
            raise ValueError(f"{where}: {name} is a float knob; use type = \"float\"")
        for key in ("low", "high"):
            if not isinstance(spec.get(key), int | float) or isinstance(spec.get(key), bool):
                raise ValueError(f"{where}: a numeric knob needs numbers `low` and `high`")
        knob.update(low=spec["low"], high=spec["high"], step=spec.get("step"),
                    log=bool(spec.get("log", False)))
        if knob["low"] > knob["high"]:
            raise ValueError(f"{where}: low is above high")
    when = spec.get("when", {})
    if not isinstance(when, dict):
        raise ValueError(f"{where}: `when` must be a table, e.g. when = {{ record_format = "
                         "\"example\" }")
    conds: dict[str, tuple[Any, ...]] = {}
    for key, value in when.items():
        values = value if isinstance(value, list) else [value]
        if key == ACCELERATOR_KEY:
            bad = [v for v in values if v not in ("GPU", "CPU")]
            if bad:
                raise ValueError(f"{where}: when.accelerator must be \"GPU\" or \"CPU\"")
        elif key not in earlier:
            raise ValueError(f"{where}: when.{key} must name a knob defined above this one")
        else:
            values = [_coerce(key, v, f"{where} when.{key}") for v in values]
        conds[key] = tuple(values)
    knob["when"] = conds
    if "otherwise" in spec:
        if not conds:
            raise ValueError(f"{where}: `otherwise` needs a `when`")
        knob["otherwise"] = _coerce(name, spec["otherwise"], f"{where} otherwise")
    at_most = spec.get("at_most")
    if at_most is not None and at_most not in _FIELD_DEFAULTS:
        raise ValueError(f"{where}: at_most must name a trainer knob")
    knob["at_most"] = at_most
    limit = spec.get("limit")
    if limit not in (None, "devices"):
        raise ValueError(f"{where}: the only limit is \"devices\"")
    knob["limit"] = limit
    return Knob(**knob)


@dataclass
class SearchSpace:
    knobs: list[Knob]
    source: str = ""

    @classmethod
    def load(cls, path: Path | None = None) -> SearchSpace:
        path = Path(path) if path is not None else DEFAULT_SPACE
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"space file not found: {path}") from None
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"space file {path} is not valid TOML: {e}") from None
        except UnicodeDecodeError:
            raise ValueError(f"space file {path} is not a text file") from None
        params = data.get("params")
        if not isinstance(params, dict) or not params:
            raise ValueError(f"space file {path}: no [params.NAME] tables")
        unknown = sorted(set(data) - {"params"})
        if unknown:
            raise ValueError(f"space file {path}: unknown top-level key(s) {', '.join(unknown)}")
        knobs: list[Knob] = []
        earlier: set[str] = set()
        for name, spec in params.items():
            knobs.append(_knob(name, spec, f"space file {path}: [params.{name}]", earlier))
            earlier.add(name)
        return cls(knobs=knobs, source=str(path))

    def resolve(
        self,
        start: TrainConfig,
        *,
        accelerator: str,
        accelerator_count: int,
        frozen: Mapping[str, str] | None = None,
    ) -> tuple[SearchSpace, list[str]]:
        """The space for one study, and notes on what was dropped or widened and why.

        `frozen` maps knobs that must keep the start value to the reason (e.g. --data fixes the
        record format).
        """
        frozen = frozen or {}
        notes: list[str] = []
        out: list[Knob] = []
        start_d = start.to_dict()
        for k in self.knobs:
            if k.name in frozen:
                notes.append(f"{k.name} not tuned: {frozen[k.name]}")
                continue
            acc = k.when.get(ACCELERATOR_KEY)
            if acc is not None and accelerator not in acc:
                notes.append(f"{k.name} not tuned: only on {'/'.join(acc)} hosts")
                continue
            when = {c: v for c, v in k.when.items() if c != ACCELERATOR_KEY}
            k = dataclasses.replace(k, when=when)
            if k.limit == "devices" and accelerator == "GPU" and k.kind == "categorical":
                kept = tuple(c for c in k.choices if c <= accelerator_count)
                if kept != k.choices:
                    notes.append(f"devices limited to the {accelerator_count} GPU(s) present")
                k = dataclasses.replace(k, choices=kept or (min(accelerator_count, 1),))
            widened = k.with_value(start_d[k.name])
            if widened is not k:
                notes.append(f"{k.name}: the starting value {start_d[k.name]!r} was added")
            out.append(widened)
        if not out:
            raise ValueError("the search space has no knob left to tune on this machine")
        return SearchSpace(knobs=out, source=self.source), notes

    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def active(self, knob: Knob, values: Mapping[str, Any]) -> bool:
        return all(_encode(c, values.get(c)) in allowed for c, allowed in knob.when.items())

    def suggest(self, trial: optuna.Trial, start: Mapping[str, Any]) -> dict[str, Any]:
        """Sample the trial's knobs (define-by-run: inactive knobs are not sampled)."""
        values = dict(start)
        params: dict[str, Any] = {}
        for k in self.knobs:
            if not self.active(k, values):
                continue
            if k.kind == "categorical":
                v = trial.suggest_categorical(k.name, list(k.choices))
            elif k.kind == "int":
                v = trial.suggest_int(k.name, int(k.low), int(k.high), step=int(k.step or 1),
                                      log=k.log)
            else:
                v = trial.suggest_float(k.name, k.low, k.high, step=k.step, log=k.log)
            params[k.name] = v
            values[k.name] = decode(k.name, v)
        return params

    def config_changes(self, params: Mapping[str, Any], start: Mapping[str, Any]) -> dict:
        """The TrainConfig changes a trial's params make: sampled values, the `otherwise` value of
        knobs whose condition does not hold, then the `at_most` clamps (declared and implied) on
        the effective values."""
        values = dict(start)
        changes: dict[str, Any] = {}
        for k in self.knobs:
            if k.name in params and self.active(k, values):
                changes[k.name] = decode(k.name, params[k.name])
            elif not self.active(k, values) and k.otherwise is not None:
                changes[k.name] = decode(k.name, k.otherwise)
            if k.name in changes:
                values[k.name] = changes[k.name]
        # The declared clamps, then TrainConfig's own (reference_model.config.AT_MOST), applied
        # even by spaces that leave the knob out or cap it by another knob: a file that tunes
        # cycle_length alone must not turn the start's interleave parallelism into an invalid
        # trial.
        clamps = [*((k.name, k.at_most) for k in self.knobs if k.at_most), *AT_MOST.items()]
        for name, cap_name in clamps:
            v, cap = values.get(name), values.get(cap_name)
            if (isinstance(v, int | float) and v != AUTOTUNE and isinstance(cap, int | float)
                    and v > cap):
                changes[name] = values[name] = cap
        return changes

    def params_for(
        self, config: Mapping[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """The params that come closest to `config` in this space, and a note for every knob
        whose value had to move to the nearest value the space allows."""
        params: dict[str, Any] = {}
        notes: list[str] = []
        for k in self.knobs:
            if not self.active(k, config):
                continue
            v = config[k.name]
            got = k.snap(v)
            if got is None:
                notes.append(f"{k.name}={v!r} is not in the search space; left to the sampler")
                continue
            if got != _encode(k.name, v):
                notes.append(f"{k.name}={v!r} is not in the search space; using {got!r}")
            params[k.name] = got
        return params, notes

    def distributions(self) -> dict[str, BaseDistribution]:
        return {k.name: k.distribution() for k in self.knobs}

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "knobs": [k.to_dict() for k in self.knobs]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SearchSpace:
        return cls(knobs=[Knob.from_dict(k) for k in d["knobs"]], source=d.get("source", ""))
