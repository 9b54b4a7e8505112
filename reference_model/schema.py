"""The feature schema shared by the data generator, the readers and the model.

Criteo's layout: a binary label, 13 numerical (count) features ``I1..I13`` and 26 categorical
features ``C1..C26``. Cardinalities default to a scaled-down profile of Criteo's: a few large
tables and many small ones, so that table-wise placement has a real balancing problem (seed 001).
"""

from __future__ import annotations

from dataclasses import dataclass, field

NUM_DENSE = 13
NUM_CAT = 26
DENSE_NAMES: tuple[str, ...] = tuple(f"I{i}" for i in range(1, NUM_DENSE + 1))
CAT_NAMES: tuple[str, ...] = tuple(f"C{i}" for i in range(1, NUM_CAT + 1))
LABEL_NAME = "label"
PAYLOAD_NAME = "payload"

# Criteo Kaggle cardinalities divided by ~100 and clipped to [4, 100_000]: keeps the real
# skew (C3, C4, C12, C16, C21 dominate) while fitting a 2-core machine's memory and time.
DEFAULT_CARDINALITIES: tuple[int, ...] = (
    1460, 583, 100_000, 22_026, 305, 24, 12_517, 633, 4, 9_314, 5_683, 83_515, 3_194,
    27, 14_992, 54_613, 10, 5_652, 2_173, 4, 70_465, 18, 15, 28_618, 105, 14_257,
)


@dataclass(frozen=True)
class Schema:
    cardinalities: tuple[int, ...] = DEFAULT_CARDINALITIES
    num_dense: int = NUM_DENSE
    dense_names: tuple[str, ...] = field(default=DENSE_NAMES)
    cat_names: tuple[str, ...] = field(default=CAT_NAMES)
    # Opaque per-example bytes that production CTR logs carry beside the model features (seed
    # 000: 3 TB for 1B examples, ~3 KB each; Criteo's 40 features are ~120 B). The pipeline reads,
    # decompresses and parses them like any feature and then drops them, so storage, GZIP and
    # parsing costs scale with realistic record sizes rather than with Criteo's tiny ones.
    payload_bytes: int = 0

    def __post_init__(self) -> None:
        if len(self.cardinalities) != len(self.cat_names):
            raise ValueError(
                f"expected {len(self.cat_names)} cardinalities, got {len(self.cardinalities)}"
            )
        if any(c < 1 for c in self.cardinalities):
            raise ValueError("every cardinality must be >= 1")
        if self.payload_bytes < 0:
            raise ValueError("payload_bytes must be >= 0")

    @property
    def num_cat(self) -> int:
        return len(self.cardinalities)

    @property
    def total_rows(self) -> int:
        return sum(self.cardinalities)

    def to_dict(self) -> dict:
        return {
            "num_dense": self.num_dense,
            "cardinalities": list(self.cardinalities),
            "payload_bytes": self.payload_bytes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> Schema:
        if d.get("num_dense", NUM_DENSE) != NUM_DENSE:
            raise ValueError(f"only {NUM_DENSE} dense features are supported")
        return cls(
            cardinalities=tuple(int(c) for c in d["cardinalities"]),
            payload_bytes=int(d.get("payload_bytes", 0)),
        )
