"""bench/diagnosis_repeats.py: several diagnosis runs summarized per preset and finding."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "diagnosis_repeats", Path(__file__).parents[1] / "bench" / "diagnosis_repeats.py")
repeats = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(repeats)


def _out(tmp_path: Path, name: str, rows: list[dict]) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "diagnosis.json").write_text(json.dumps({"command": "x", "rows": rows}))
    return d


def test_spread_and_goal_across_runs(tmp_path, capsys):
    outs = [_out(tmp_path, f"run{i}", [
        {"preset": "per_example", "expected": "input_preprocessing", "found": "high",
         "estimated": est, "measured": meas},
        {"preset": "clean", "expected": "(none)", "found": "-"},
    ]) for i, (est, meas) in enumerate([(9.0, 10.0), (12.0, 8.0), (10.0, 10.0)])]
    rows = {r[0]: r for r in repeats.summary_rows(repeats.load_rows(outs))}
    pe = rows["per_example"]
    assert pe[2] == "3" and pe[3] == "high"
    assert pe[4] == "10.00x (9.00–12.00)" and pe[5] == "10.00x (8.00–10.00)"
    assert pe[6] == "+0%" and pe[7] == "-10% +50% +0%" and pe[8] == "2/3"
    assert rows["clean"][4:] == ["-", "-", "-", "-", "-"]
    assert repeats.main([str(o) for o in outs]) == 0
    assert "per_example" in capsys.readouterr().out


def test_missing_run_is_one_line_error(tmp_path):
    with pytest.raises(SystemExit, match="cannot read"):
        repeats.main([str(tmp_path / "nowhere")])
