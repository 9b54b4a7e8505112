"""`preprocessing_in_step`: feature preprocessing runs inside the training step.

Recommenders turn raw categorical values into table rows: hashing, vocabulary lookups, string
parsing. Done in the model (Keras preprocessing layers inside it, hashed or vocabulary feature
columns), that work sits on the step's critical path every step, on the host, where tf.data
could have overlapped it or the data could have held its result (seed 002: the string hashing
of a Wide & Deep step was among its most time-consuming ops). Signals: host TF ops on the step's
threads (not tf.data's: those are input work, `input_preprocessing`'s business) whose op type
says which (docs/trace-signals.md, "Preprocessing ops in the step"):
- `ints_as_strings`: integer ids formatted as text to be hashed, `AsString` then
  `StringToHashBucketFast` in one name scope, or grappler's fusion of the pair,
  `_TensorToHashBucketFast` (Keras' Hashing layer on integers, hashed feature columns). An
  integer hash does the same job for INTEGER_HASH_COST of the time, so the saving is the rest.
- `string_ops`: other string ops (hashing string features, splitting, number parsing, regexes).
- `vocabulary_lookups`: hash-table lookups (`LookupTableFindV2`: StringLookup, IntegerLookup,
  vocabulary feature columns).
The last two leave the step whole when the data holds their result (written once), which the
estimate assumes, or overlap it from tf.data where cores or a device are free. The share is the
time any of the ops runs inside steps; with an accelerator only the part while no kernel runs
(the device waits for the ids).
"""

from __future__ import annotations

from analyzers.context import Context
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.signals.os_sampler import summarize
from analyzers.signals.preprocessing_ops import (
    CAUSE_IDS,
    FUSED_HASH,
    OP_TYPES,
    cause_codes,
    is_preprocessing_op,
)

ID = "preprocessing_in_step"
MIN_SHARE = 0.03
# An integer hash (cast, multiply, mask) and its scaling into the table (multiply, shift) take
# this share of what formatting and fingerprinting the ids takes, which Keras' Hashing layer does
# into its bins in one op: 0.2 + 0.1 vs 1.7 ms per 53k ids on the development VM, TF 2.21 CPU,
# rounded up (docs/trace-signals.md, "Preprocessing ops in the step").
INTEGER_HASH_COST = 0.2
_WHAT = {
    "ints_as_strings": "integer ids hashed through strings",
    "string_ops": "string ops",
    "vocabulary_lookups": "vocabulary lookups",
}
_REMEDY = {
    "ints_as_strings": (
        "Hash integer ids with integer arithmetic, not through strings: Keras' Hashing layer "
        "and hashed feature columns format every id as text first; a multiplicative hash, "
        "rows = ((ids * 2654435761) mod 2**32 * num_rows) >> 32, or a modulo when ids are "
        "already spread, costs a fraction of it; better still, store hashed ids when the data "
        "is written."),
    "moved": (
        "Take the preprocessing out of the model: write its result (hashed ids, vocabulary "
        "indices, parsed numbers) into the data once, or run the same layers in the input "
        "pipeline, dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE) before "
        "prefetch, so it overlaps the step instead of lengthening it (Keras preprocessing "
        "layers such as StringLookup, IntegerLookup and Hashing work inside dataset.map)."),
}


def detect(ctx: Context) -> Finding | None:
    if ctx.framework != "tensorflow" or not OP_TYPES.intersection(ctx.present("op_type")):
        return None
    # Filtered by name (once per distinct name): a large trace has millions of host ops.
    ops = ctx.in_steps(kinds=("host_op",), name=is_preprocessing_op,
                       columns=("host", "name", "op_type", "start_ns", "end_ns", "dur_ns"))
    total = float(ctx.total_step_ns)
    if ops.empty or total <= 0:
        return None
    n = ctx.worker_steps(ops["host"])  # counts per step are one worker's
    step_ms = ctx.steps.median_step_ns() / 1e6
    shares: dict[str, float] = {}
    savings: dict[str, float] = {}
    evidence: list[str] = []
    codes = cause_codes(ops["name"])
    for k, cause in enumerate(CAUSE_IDS):
        mine = ops[codes == k]
        if mine.empty:
            continue
        # Each worker's ops against its own kernels (one worker's share).
        share = ctx.kernel_idle_share(mine)
        shares[cause] = share
        savings[cause] = share * (1 - INTEGER_HASH_COST) if cause == "ints_as_strings" else share
        kinds = ", ".join(f"{t}: grappler's fusion of AsString + StringToHashBucketFast"
                          if t == FUSED_HASH else t
                          for t in sorted({str(t) for t in mine["op_type"].unique()}))
        evidence.append(
            f"{_WHAT[cause]}: {len(mine) / n:.0f} op(s) per step ({kinds}) on the step's "
            f"threads, running {share:.1%} of the step ({share * step_ms:.2f} ms of a "
            f"{step_ms:.1f} ms step)")
    # Causes running side by side save their union, not their sum.
    union = ctx.kernel_idle_share(ops)
    # Of the time the ops run, the share while no kernel runs (all of it without a device).
    exposed = 1.0
    if ctx.has_accelerator:
        covered = ctx.kernel_idle_share(ops, kernels=False)
        exposed = union / covered if covered else 0.0
    saved = min(sum(savings.values()), union)
    if saved < MIN_SHARE:
        return None
    if "ints_as_strings" in savings:
        evidence.append(f"an integer hash does the same for about {INTEGER_HASH_COST:.0%} of "
                        "the time: the rest is counted")
    if ctx.has_accelerator:
        evidence.append(f"host ops of a step the device waits for: only the {exposed:.0%} of "
                        "their time while no kernel ran is counted")
    moved = [c for c in savings if c != "ints_as_strings"]
    if moved and not ctx.has_accelerator:
        summary = summarize(ctx)
        busy = (f" (the cores were {summary.cpu_utilization:.0%} busy during the steps)"
                if summary else "")
        evidence.append("the estimate is for the result written into the data once: the work "
                        "leaves the step. On this CPU-only host, moved into tf.data instead, it "
                        "would overlap the step only as far as cores are idle" + busy)
    remedy = " ".join([*([_REMEDY["ints_as_strings"]] if "ints_as_strings" in savings else []),
                       *([_REMEDY["moved"]] if moved else [])])
    changes = ({"id_hashing": "integer"} if ctx.config and "ints_as_strings" in savings
               and ctx.config.get("id_hashing") == "string" else {})
    return Finding(
        id=ID,
        title="Feature preprocessing runs inside the training step ("
              + ", ".join(_WHAT[c] for c in savings) + ")",
        step_fraction=union,
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=remedy,
        numbers={"causes": list(savings),
                 **{f"{c}_fraction": round(s, 4) for c, s in shares.items()},
                 "ops_per_step": round(len(ops) / n, 1),
                 "exposed_fraction": round(exposed, 4)},
        top_events=heaviest_events(ops),
        config_changes=changes,
    )
