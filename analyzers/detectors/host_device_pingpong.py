"""`host_device_pingpong`: host-only ops between device ops force small copies every step.

Signals (accelerator traces only): within a step, device→host copies (MemcpyD2H) followed by TF ops
on host threads and host→device copies again, while the device sits idle. The exposed host
compute plus those copies is what keeping the step on the device would save; preprocessing ops
(hashing, string ops, vocabulary lookups) among the host work are `preprocessing_in_step`'s,
embedding lookups and updates (and then the copies) `embeddings_on_host`'s, the input's copies
and host ops beside them `exposed_input_copy`'s.
"""

from __future__ import annotations

from collections.abc import Callable

from analyzers.context import Context
from analyzers.detectors import (
    embeddings_on_host,
    exposed_input_copy,
    preprocessing_in_step,
    run_detector,
)
from analyzers.events import is_device_plane
from analyzers.findings import Finding, Skipped, heaviest_events, speedup_from_saving
from analyzers.signals.copy_back import before_first_copy_back, copies_back_per_step
from analyzers.signals.embedding_ops import embedding_host_ops
from analyzers.signals.preprocessing_ops import is_preprocessing_op

ID = "host_device_pingpong"
MIN_SHARE = 0.03
_REMEDY = {
    "tensorflow": ("Keep the step on the device: replace host-only ops (string ops, py_function, "
                   "unsupported dtypes such as int64 on some kernels) with device-capable ones, "
                   "move them into tf.data, or place them explicitly; check with "
                   "tf.debugging.set_log_device_placement."),
    "pytorch": ("Keep the step on the device: avoid .item(), .cpu(), .numpy() and Python "
                "branches on tensor values inside the step (each one waits for the GPU and "
                "copies back), accumulate metrics on the GPU and read them once per log "
                "interval; torch.cuda.set_sync_debug_mode(\"warn\") reports each sync."),
}


def detect(ctx: Context) -> Finding | Skipped | None:
    if not ctx.has_accelerator:
        return Skipped(ID, "no accelerator plane in the trace: host and device are the same CPU")
    per_step = copies_back_per_step(ctx)
    host = ctx.fractions.get("host_compute", 0.0)
    copies = ctx.fractions.get("copy_h2d", 0.0)
    # Preprocessing ops among the host ops are `preprocessing_in_step`'s, with a remedy of its
    # own: their exposed time is counted there, not twice.
    pre = run_detector(preprocessing_in_step, ctx)
    preprocessing = pre.step_fraction if isinstance(pre, Finding) else 0.0
    # So are embedding lookups and updates, with the copies of their bounce, which
    # `embeddings_on_host` counts when it finds them.
    emb = run_detector(embeddings_on_host, ctx)
    embeddings = _number(emb, "host_fraction")
    # And the input's copies, with host ops running beside them, `exposed_input_copy`'s.
    inp = run_detector(exposed_input_copy, ctx)
    beside = _number(inp, "host_fraction")
    host = max(host - preprocessing - embeddings - beside, 0.0)
    copies = max(copies - _number(emb, "copies_fraction") - _number(inp, "copy_fraction"), 0.0)
    # Half the exposed copy time: the copies the bounce adds go, the input's own stay.
    share = host + copies * 0.5
    if per_step < 1 or share < MIN_SHARE:
        return None
    claimed = _claimed(ctx, pre, emb, inp)
    host_ops = ctx.in_steps(kinds=("host_op",), plane=lambda p: not is_device_plane(p),
                            name=lambda n: not claimed(n),
                            columns=("host", "name", "step_idx", "start_ns", "dur_ns"))
    if host_ops.empty:
        return None
    # A bounce is host work after results came back; host-only ops before any copy back are
    # the step's own host placement (an op without a GPU kernel, a py_function on the input).
    dur = host_ops["dur_ns"].to_numpy()
    after = float(dur[~before_first_copy_back(ctx, host_ops)].sum()) / max(float(dur.sum()), 1)
    bounce = after >= 0.5
    return Finding(
        id=ID,
        title=("The step bounces between host and device" if bounce else
               "Host-only ops run inside the step while the device idles"),
        step_fraction=share,
        speedup=speedup_from_saving(share * 0.8),
        evidence=[f"{per_step:.0f} device→host copies per step; host work while the device "
                  f"idles: host compute {host:.1%} of the step, copies between host and device "
                  f"{copies:.1%} (half of it counted); {after:.0%} of the host ops' time comes "
                  "after a copy back in its step",
                  *([f"less {preprocessing:.1%} of preprocessing ops (preprocessing_in_step)"]
                    if preprocessing else []),
                  *([f"less {embeddings:.1%} of embedding ops (embeddings_on_host)"]
                    if embeddings else []),
                  *([f"less {beside:.1%} of host ops beside the input's copy "
                     "(exposed_input_copy)"] if beside else [])],
        remedy=_REMEDY[ctx.framework],
        numbers={"d2h_per_step": round(per_step, 1), "exposed_fraction": round(share, 4)},
        top_events=heaviest_events(host_ops),
    )


def _number(found: object, key: str) -> float:
    return found.numbers[key] if isinstance(found, Finding) else 0.0


def _claimed(ctx: Context, pre: object, emb: object, inp: object) -> Callable[[str], bool]:
    """Whether a host op is one the other findings count: preprocessing ops, embedding lookups,
    and the ops exposed_input_copy found beside the input's copy (its top events)."""
    names = {str(n) for n in embedding_host_ops(ctx)["name"].unique()} if isinstance(
        emb, Finding) else set()
    if isinstance(inp, Finding):
        names |= {t["name"] for t in inp.top_events}
    preprocessing = isinstance(pre, Finding)
    return lambda name: name in names or (preprocessing and is_preprocessing_op(name))
