"""What the remedies for a Keras PyDataset that holds the GIL buy: untraced step time of the same
Keras fit (a 64-256-1 MLP, batches of 256 Criteo-like rows) fed four ways, against the baseline
`loop` (one worker, each batch built one example at a time in Python: what
`tests/analyzers/foreign_jobs.py pydataset` records; docs/trace-signals.md, "GIL waits").

- `loop`: the baseline, `PyDataset(workers=1)`: Keras' generator runs `__getitem__` on a tf.data
  thread, under the GIL the training loop needs back after each call;
- `vectorized`: the same batch built with whole-array NumPy (the remedy's "less Python per batch");
- `processes`: the loop in 4 worker processes (`use_multiprocessing=True`);
- `precomputed`: 64 batches built before the fit and handed out again (no Python work per batch:
  the floor).

Each variant runs in its own process, variants interleaved over --repeats rounds; each times
--steps steps after 5 warm-up steps. Prints the median step per variant and its speedup over
`loop`.

    .venv/bin/python bench/pydataset_fixes.py [--repeats 3] [--steps 150]
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from interleaved import bench_main  # bench/, on sys.path when this script runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("loop", "vectorized", "processes", "precomputed")


def child(variant: str, steps: int) -> float:
    """Mean step time (ms) over one fit of `steps` steps (Keras times no single step)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from tests.analyzers.pydataset_rows import rows_in_a_loop, rows_vectorized

    ready = [rows_in_a_loop(i) for i in range(64)] if variant == "precomputed" else []
    build = {"loop": rows_in_a_loop, "processes": rows_in_a_loop, "vectorized": rows_vectorized,
             "precomputed": lambda i: ready[i % 64]}[variant]

    class Batches(tf.keras.utils.PyDataset):
        def __len__(self) -> int:
            return 10_000

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            return build(i)

    kwargs = {"workers": 4, "use_multiprocessing": True} if variant == "processes" else {}
    data = Batches(**kwargs)
    model = tf.keras.Sequential([tf.keras.Input((64,)),
                                 tf.keras.layers.Dense(256, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile("adam", "binary_crossentropy")
    model.fit(data, steps_per_epoch=5, epochs=1, verbose=0)
    t = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    return (time.perf_counter() - t) / steps * 1e3


def main(argv: list[str] | None = None) -> int:
    return bench_main(argv, script=__file__, doc=__doc__, variants=VARIANTS, child=child,
                      steps=150, title="Keras PyDataset remedies, {steps} steps, {repeats} "
                      "rounds interleaved (median; baseline: loop)", baseline="loop",
                      unit="step ms")


if __name__ == "__main__":
    sys.exit(main())
