import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Float32 sums are reordered across devices (the all-reduce adds per-replica partial sums), so
# the trajectories agree to rounding, not bit for bit.
REL_TOL = 1e-4


def _losses(cases: list[dict], steps: int = 5) -> list[dict]:
    spec = {
        "cases": cases,
        "cardinalities": [50, 3000, 7, 900, 12, 400] + [20] * 20,
        "batch": 256,
        "steps": steps,
        "seed": 3,
    }
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reference_model.hybrid_losses", json.dumps(spec)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_same(reference: list[float], other: list[float]) -> None:
    assert len(reference) == len(other)
    for a, b in zip(reference, other, strict=True):
        assert b == pytest.approx(a, rel=REL_TOL)


def test_n_device_hybrid_matches_one_device():
    cases = [
        {"devices": 1, "split": "table"},
        {"devices": 2, "split": "table"},
        {"devices": 4, "split": "table"},
        {"devices": 2, "split": "column"},
        {"devices": 4, "split": "column"},
        {"devices": 4, "split": "table", "fused": False},
        {"devices": 4, "split": "table", "serial": True},
        {"devices": 4, "split": "table", "per_device": True},
        {"devices": 2, "split": "column", "per_device": True, "serial": True},
    ]
    results = _losses(cases)
    reference = results[0]["losses"]
    # Training really moves the loss, so equality is not two constant curves.
    assert reference[-1] < reference[0]
    for r in results[1:]:
        _assert_same(reference, r["losses"])


def test_hashed_ids_train_the_same_on_any_placement():
    """A hash depends on the id and its table's rows only, so every placement trains the same;
    out-of-range rows would fail the lookup (CPU gathers check bounds)."""
    cases = [{"devices": 1, "split": "table"}]
    for hashing in ("string", "integer"):
        cases += [{"devices": 1, "split": "table", "hashing": hashing},
                  {"devices": 4, "split": "table", "hashing": hashing},
                  {"devices": 2, "split": "column", "hashing": hashing},
                  {"devices": 4, "split": "table", "fused": False, "hashing": hashing}]
    plain, *hashed = (r["losses"] for r in _losses(cases))
    for group in (hashed[:4], hashed[4:]):
        assert group[0][-1] < group[0][0]
        for other in group[1:]:
            _assert_same(group[0], other)
    # Hashing moves ids to other rows: neither trajectory is the unhashed one.
    assert hashed[0] != pytest.approx(plain, rel=REL_TOL)
    assert hashed[4] != pytest.approx(plain, rel=REL_TOL)
    assert hashed[0] != pytest.approx(hashed[4], rel=REL_TOL)


@pytest.mark.slow
def test_xla_hybrid_matches_one_device():
    results = _losses([{"devices": 1, "split": "table", "xla": True},
                       {"devices": 2, "split": "column", "xla": True}], steps=4)
    _assert_same(results[0]["losses"], results[1]["losses"])


def test_place_tables_balances_rows():
    from reference_model.hybrid import place_tables

    cards = (1000, 10, 10, 10, 900, 5, 5, 5)
    groups = place_tables(cards, 2)
    assert sorted(t for g in groups for t in g) == list(range(len(cards)))
    loads = [sum(cards[t] for t in g) for g in groups]
    assert max(loads) <= 1000 + 15
    with pytest.raises(ValueError):
        place_tables(cards, 9)
