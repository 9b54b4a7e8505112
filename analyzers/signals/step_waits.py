"""The step's own waits for its next batch.

On the Python thread for an eager fetch (`for batch in dataset`), or on whichever thread runs
the get-next op inside a tf.function: Keras' train function, a custom loop's `next(iterator)` in
the function, the reference trainer (docs/trace-signals.md, "Signals the detectors key on": input
wait). A MultiDeviceIterator's own thread pulls ahead of the step: a producer, not a wait of the
step (docs/trace-signals.md, "Several hosts").
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from analyzers.context import Context

PRODUCER_LINES = ("tf_data_multi_device_iterator",)


def step_input_waits(ctx: Context, columns: Iterable[str], host: str | None = None
                     ) -> pd.DataFrame:
    return ctx.in_steps(kinds=("input_wait",), host=host, columns=tuple(columns),
                        line=lambda n: not n.startswith(PRODUCER_LINES))
