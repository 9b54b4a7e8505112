"""What a detector returns, and the one rule that turns an estimated gain into a severity.

Severity follows the estimated speedup if the problem were fixed, never the mere presence of a
pattern: a casting layer that costs 2% of the step is `low` even though it is clearly there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from analyzers.events import chunks

SEVERITIES = ("high", "medium", "low")
# Estimated speedup thresholds (x) for each severity.
HIGH_SPEEDUP = 1.25
MEDIUM_SPEEDUP = 1.08


def severity_for(speedup: float) -> str:
    if speedup >= HIGH_SPEEDUP:
        return "high"
    if speedup >= MEDIUM_SPEEDUP:
        return "medium"
    return "low"


# No fix is credited with more than this share of the step: what is left is the work itself.
MAX_SAVING = 0.95
MAX_SPEEDUP = 1.0 / (1.0 - MAX_SAVING)


def speedup_text(impact: dict[str, Any]) -> str:
    """A finding's estimate as the report, the diff and the dashboard print it: a capped one is
    a floor ("at least 20.00x"; a retraced function measured 78x against the cap)."""
    est = impact["estimated_speedup"]
    return f"at least {est:.2f}x" if impact.get("estimate_capped") else f"{est:.2f}x"


def speedup_from_saving(saved_fraction: float) -> float:
    """Step time shrinks by `saved_fraction` of itself: the what-if every detector reports."""
    saved = min(max(saved_fraction, 0.0), MAX_SAVING)
    return 1.0 / (1.0 - saved)


@dataclass
class Finding:
    id: str
    title: str
    step_fraction: float  # share of step time the problem occupies
    speedup: float  # estimated speedup if fixed (x)
    evidence: list[str]  # human-readable lines, numbers first
    remedy: str
    numbers: dict[str, Any] = field(default_factory=dict)  # machine-readable evidence
    top_events: list[dict[str, Any]] = field(default_factory=list)
    time_ranges_ms: list[tuple[float, float]] = field(default_factory=list)
    config_changes: dict[str, Any] = field(default_factory=dict)  # reference-trainer fields
    fix_command: str | None = None  # filled by the report for reference-trainer runs
    severity: str = ""

    def __post_init__(self) -> None:
        if not self.severity:
            self.severity = severity_for(self.speedup)

    @property
    def capped(self) -> bool:
        """The what-if saved more than MAX_SAVING of the step: the estimate is a floor."""
        return self.speedup >= MAX_SPEEDUP * (1 - 1e-9)

    def impact(self) -> dict[str, Any]:
        return {"step_fraction": round(self.step_fraction, 4),
                "estimated_speedup": round(self.speedup, 3), "estimate_capped": self.capped}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["impact"] = self.impact()
        d["remedy"] = {"text": self.remedy, "config_changes": self.config_changes,
                       "command": self.fix_command}
        d["evidence"] = {"summary": self.evidence, "numbers": self.numbers,
                         "top_events": self.top_events, "time_ranges_ms": self.time_ranges_ms}
        for k in ("step_fraction", "speedup", "numbers", "top_events", "time_ranges_ms",
                  "config_changes", "fix_command"):
            d.pop(k)
        return d


def heaviest_events(df: pd.DataFrame, n: int = 5, where: np.ndarray | None = None,
                    fold: Callable[[str], str] | None = None) -> list[dict]:
    """The events behind a finding: the n names with the most total time (of the rows `where`
    is true, when given; names that `fold` maps to one name count as one)."""
    if df.empty:
        return []
    name = df["name"]
    if not isinstance(name.dtype, pd.CategoricalDtype):
        name = name.astype("category")
    # Sums by code, a block of rows at a time: a groupby over millions of input-work rows cost
    # ~0.1 s, and whole-column temporaries ~100 MB.
    names = [str(c) for c in name.cat.categories]
    folded: dict[str, int] = {}
    to_folded = [folded.setdefault(fold(x) if fold else x, len(folded)) for x in names]
    names = list(folded)
    k = len(names) + 1  # the last slot gathers code -1 (no name)
    table = np.array([*to_folded, k - 1], dtype=np.intp)  # code -1 reads the last entry
    codes = name.array.codes
    dur = df["dur_ns"].to_numpy()
    count = np.zeros(k, dtype=np.int64)
    total = np.zeros(k)  # float sums of whole ns: exact below 2**53 ns (104 days)
    for block in chunks(len(codes)):
        c, d = codes[block], dur[block]
        if where is not None:
            c, d = c[where[block]], d[where[block]]
        c = table[c]
        count += np.bincount(c, minlength=k)
        total += np.bincount(c, weights=d, minlength=k)
    count[-1] = 0
    total[-1] = 0
    top = [i for i in np.lexsort((-total, count == 0))[:n].tolist() if count[i]]  # absent last
    return [{"name": names[i], "total_ms": round(float(total[i]) / 1e6, 3), "count": int(count[i])}
            for i in top]


@dataclass
class Skipped:
    """A detector that could not judge this trace, and why (e.g. no sampler data)."""

    id: str
    reason: str
