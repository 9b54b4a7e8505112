"""`one_hot_matmul`: categorical features multiplied as one-hot vectors instead of looked up.

A recommender's ids belong in embedding lookups: `Dense(D)` over `one_hot(id, V)` computes the
same `W[id]` as `Embedding(V, D)`, but writes a V-wide row per id, multiplies it by the whole
V x D weight, and in the backward pass builds a dense V x D weight gradient. The common forms:
Keras `CategoryEncoding` / `StringLookup` / `IntegerLookup` / `Hashing` with
`output_mode="one_hot"` or `"multi_hot"` feeding a `Dense`, `tf.one_hot` before a matmul, feature
columns' `indicator_column` in a `DenseFeatures`, a "wide" linear part over concatenated
one-hots. xprof shows it as ordinary host or device compute.

Signals (TF op names and types, docs/trace-signals.md, "One-hot features multiplied"):
- encodings: `OneHot` and the bincounts behind multi-hot and count encodings (`DenseBincount`,
  `Bincount`, `SparseBincount`, `RaggedBincount`), outside summary scopes (a histogram's `OneHot`
  is `debug_ops_in_step`'s);
- what consumes them: TF's executor runs a finished op's ready successor on the same thread, a
  few microseconds later, so the ops that follow an encoding on its line (through layout ops:
  `Cast`, `Reshape`, `ConcatV2`, a multi-hot's `Sum`/`Max`) lead to the matmul it feeds. Only a
  chain that reaches a matmul counts; an op name that did so in any step counts in every step;
- the matmul's backward pass: its gradient ops under the same name (`gradient_tape/<op>/` in
  TF2, `gradients/<op>_grad/` in TF1; a fused `_MklNativeFusedMatMul` is named after its last
  fused op, its gradients after the layer's `MatMul`);
- the weights' dense update: the op a weight gradient's thread runs next, when it is a whole-
  variable `Apply*` (TF1's optimizers: `Adam/update_w/ResourceApplyAdam`). Keras 3 updates each
  variable with ordinary element-wise ops that nothing ties to the weight;
- in XLA-compiled steps the thunks name HLO instructions, not TF ops, and run in the schedule's
  order: the compiled module the profiler saves (`RunData.hlo_ops`) gives each one's TF op and
  operands, so a dot reading an encoding (through layout instructions) is found by dataflow.

Estimate (the remedy: lookups, then rows-only updates): a lookup of one row per id replaces the
encodings, the layout ops between and the matmuls both ways (taken as free: it moves D values
per id where the product moved V x D), and a row-sparse update the linked dense ones. As in
`debug_ops_in_step`, on a CPU host the saving is the ops' share of all host ops' busy time, of
the time ops cover in the step; in an XLA:CPU step, the thunks' share of all thunks' traced
time, of the time the modules ran (its parallel dots run off the traced threads:
`signals/compiled.py`); with an accelerator, the kernels they launched (`tf_op`), plus their host
ops' time while no kernel runs. An update not linked is not counted (Keras' Adam densifies a
lookup's gradient too: `dense_embedding_update` then names it). TF1's Adam keeps its
whole-table work on a lookup's gradient, in more passes: the evidence says so.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from analyzers.context import Context
from analyzers.detectors.debug_ops_in_step import SUMMARY_SCOPE
from analyzers.events import cat_map, cat_mask, is_device_plane, op_type_of
from analyzers.findings import Finding, heaviest_events, speedup_from_saving
from analyzers.ingest.hlo import HloOp
from analyzers.signals.compiled import compiled_share

ID = "one_hot_matmul"
MIN_SHARE = 0.03
# An encoding's successor starts this soon after it ends on the same line (measured 1-10 us
# on TF 2.21's CPU executor; a consumer handed to another thread is not followed).
MAX_GAP_NS = 50_000
# Layout ops followed between an encoding and its matmul.
MAX_HOPS = 4
_ENCODINGS = re.compile(r"^(OneHot|(Dense|Sparse|Ragged)?Bincount)$")
_MATMULS = re.compile(
    r"^_?(Mkl)?(Native)?(Fused)?(MatMul|BatchMatMul(V[23])?|Einsum|SparseMatMul)$")
_LAYOUT = re.compile(r"^_?(Mkl)?(Cast|Reshape|ConcatV2|Concat|ExpandDims|Squeeze|Identity|Sum|Max|"
                     r"Mul|Pack|Minimum)$")
# A dense optimizer update of a whole variable (TF1 optimizers, Keras 2's fused ones); after a
# lookup it becomes a row-sparse one (`ResourceSparseApplyAdagradV2`, a scatter), except Adam's.
_DENSE_APPLY = re.compile(r"^_?(Mkl)?(Resource)?Apply(?!.*Sparse)\w+$")
_ADAM_APPLY = re.compile(r"Apply(Adam|AdaMax)")
# Row roles: 0 other, then these.
_ENCODING, _LAYOUT_OP, _MATMUL, _APPLY = 1, 2, 3, 4
_DIGITS = re.compile(r"\d+(_\d+)*")
_TAPE, _TF1_GRADIENTS = "gradient_tape/", "gradients/"
_REMEDY = (
    "Look the ids up instead of multiplying one-hot vectors: Embedding(V, D) computes the same "
    "W[id] as Dense(D, use_bias=False) over one_hot(id, V), without the V-wide rows, the V x D "
    "products and the dense V x D weight gradient. Replace CategoryEncoding / StringLookup / "
    "IntegerLookup / Hashing with output_mode=\"one_hot\" (or tf.one_hot) plus Dense by the "
    "lookup layer's integer output plus Embedding; a multi-hot or count encoding by Embedding "
    "and a masked sum or mean over the ids (tf.nn.safe_embedding_lookup_sparse with "
    "combiner=\"sum\", weights for counts); feature columns' indicator_column by "
    "embedding_column; a linear \"wide\" part over concatenated one-hots by Embedding(V, 1) "
    "summed over the features. Then update the tables' rows only (a row-sparse optimizer: see "
    "dense_embedding_update).")


def _role(op_type: str) -> int:
    if _ENCODINGS.match(op_type):
        return _ENCODING
    if _MATMULS.match(op_type):
        return _MATMUL
    if _DENSE_APPLY.match(op_type):
        return _APPLY
    return _LAYOUT_OP if _LAYOUT.match(op_type) else 0


def _roles(names: pd.Series) -> np.ndarray:
    """Per row of a categorical `scope/op:Type` column, its role (0 where missing: a kernel
    without a `tf_op`); encodings under a summary scope are a histogram's."""
    table = np.array([0 if SUMMARY_SCOPE.search(str(n)) else _role(op_type_of(str(n)))
                      for n in names.cat.categories] + [0], dtype=np.int8)
    return table[names.array.codes]


def detect(ctx: Context) -> Finding | None:
    if ctx.framework != "tensorflow" or ctx.total_step_ns <= 0:
        return None
    gpu = ctx.has_accelerator and "tf_op" in ctx.events
    hlo = ctx.run.hlo_ops
    names = [*ctx.present("name"), *(ctx.present("tf_op") if gpu else ()),
             *(op.tf_op for op in hlo.values())]
    if not any(_ENCODINGS.match(op_type_of(n)) for n in names):
        return None
    cols = ("host", "line", "name", "step_idx", "start_ns", "end_ns", "dur_ns")
    host_ops = ctx.in_steps(kinds=("host_op",), columns=cols)
    pool, on = host_ops, "host ops"
    if gpu:
        kernels = ctx.in_steps(kinds=("device_compute",), plane=is_device_plane,
                               columns=("host", "line", "tf_op", "step_idx", "start_ns", "end_ns",
                                        "dur_ns")).rename(columns={"tf_op": "name"})
        if not kernels.empty and (_roles(kernels["name"]) == _ENCODING).any():
            pool, on = kernels, "kernels"
    lines = _Lines(pool)
    counted, unlinked = _counted(lines)
    if hlo:
        ran = set(ctx.present("name"))
        for part, thunks in _xla_counted(hlo).items():
            counted[part] |= thunks & ran
    if not counted["matmuls"] and not counted["backward"]:
        return None
    # XLA's thunks stand for the modules' time, part of it untraced (signals/compiled.py).
    thunks = on == "host ops" and any(n in hlo for part in counted.values() for n in part)
    if thunks:
        pool, on = pool[cat_mask(pool["name"], hlo.__contains__)], "XLA thunks"
    fractions, shares = _shares(ctx, pool, host_ops, counted, on)
    saved = sum(fractions.values())
    if saved < MIN_SHARE:
        return None
    mine = pool[cat_mask(pool["name"], set().union(*counted.values()).__contains__)]
    n = ctx.worker_steps(mine["host"])
    encodings = mine["name"][cat_mask(mine["name"], counted["encodings"].__contains__)]
    kinds = pd.Series(cat_map(encodings, lambda name: op_type_of(
        hlo[name].tf_op if name in hlo else name))).value_counts()
    step_ms = ctx.steps.median_step_ns() / 1e6
    matmuls = sorted(counted["matmuls"] or counted["backward"])
    compiled = sum(m in hlo for m in matmuls)
    evidence = [
        f"{sum(kinds) / n:.0f} one-hot or multi-hot encoding(s) per step ("
        + ", ".join(f"{t} x{c / n:.0f}" for t, c in kinds.items())
        + f") handed straight to {len(matmuls)} matmul(s) ("
        + ", ".join(_label(m, hlo) for m in matmuls[:3]) + (", ..." if len(matmuls) > 3 else "")
        + f"): categorical features multiplied as one-hot vectors, {saved:.1%} of the step "
        f"({saved * step_ms:.2f} ms of a {step_ms:.1f} ms step)",
        f"of the {on}' {'traced' if thunks else 'busy'} time: " + ", ".join(shares),
        "estimate: lookups of one row per id replace them (taken as free), and rows-only "
        "updates the weights' dense ones: "
        + ("each thunk's share of the thunks' traced time, of the time the modules ran"
           if thunks else f"their share of the {on}' busy time, of the part of the step "
           f"the {on} cover")
        + ("" if counted["updates"] else "; the optimizer's update of the weights is not "
           "counted (not told apart from the others': a dense optimizer such as Keras' Adam "
           "densifies a lookup's gradient too)"),
    ]
    if any(_ADAM_APPLY.search(u) for u in counted["updates"]):
        evidence.append(
            "the weights are updated by TF1's Adam (ApplyAdam): on a lookup's gradient it still "
            "decays every row's moments, in several unfused passes over the whole table "
            "(its docstring; LazyAdam does not), so keeping it wins much less than this: "
            "update the tables with a row-sparse optimizer (SGD, Adagrad, LazyAdam)")
    if compiled:
        evidence.append(
            f"{compiled} of the matmuls compiled by XLA: their inputs read from the compiled "
            "module's HLO (XLA does not turn them into lookups); XLA:CPU runs parallel dots off "
            "the traced threads, hence the modules' time shared out: a lower bound when the "
            "untraced work is these matmuls' own")
    if unlinked:
        evidence.append(f"{unlinked} encoding op name(s) never seen handing to a matmul are "
                        "left out (their consumer ran on another thread)")
    return Finding(
        id=ID,
        title="Categorical features are multiplied as one-hot vectors instead of looked up",
        step_fraction=min(saved, 1.0),
        speedup=speedup_from_saving(saved),
        evidence=evidence,
        remedy=_REMEDY,
        numbers={**{f"{k}_fraction": round(v, 4) for k, v in fractions.items()},
                 "encodings_per_step": round(sum(kinds) / n, 1),
                 "matmuls": len(matmuls), "updates": len(counted["updates"]),
                 "on": "kernels" if on == "kernels" else "host"},
        top_events=heaviest_events(mine),
    )


class _Lines:
    """A trace's ops in order on each line: which op each one's thread (or stream) ran next."""

    def __init__(self, ops: pd.DataFrame) -> None:
        order = np.lexsort((ops["start_ns"].to_numpy(), ops["line"].array.codes,
                            ops["host"].array.codes))
        host = ops["host"].array.codes[order]
        line = ops["line"].array.codes[order]
        self.start = ops["start_ns"].to_numpy(np.int64)[order]
        self.end = ops["end_ns"].to_numpy(np.int64)[order]
        self.name = ops["name"].array.codes[order]
        self.role = _roles(ops["name"])[order]
        self.categories = ops["name"].cat.categories
        self._next = np.full(len(order), -1)
        same = (host[1:] == host[:-1]) & (line[1:] == line[:-1])
        self._next[:-1][same] = np.arange(1, len(order))[same]

    def after(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(which of `rows` have one, the op their line ran next): started within MAX_GAP_NS."""
        nxt = self._next[rows]
        ok = nxt >= 0
        ok[ok] = self.start[nxt[ok]] - self.end[rows[ok]] <= MAX_GAP_NS
        return ok, nxt[ok]

    def names(self, rows: np.ndarray) -> set[str]:
        return {str(self.categories[c]) for c in np.unique(self.name[rows]) if c >= 0}


def _counted(lines: _Lines) -> tuple[dict[str, set[str]], int]:
    """The op names the lookups replace, by part, and how many encoding names were left out:
    each encoding followed on its line, through layout ops, to a matmul; the matmuls' gradients
    by name; the dense updates their weight gradients hand to."""
    enc = np.flatnonzero(lines.role == _ENCODING)
    cur, origin = enc, enc
    linked, matmuls, layout = [], [], []
    for _ in range(MAX_HOPS + 1):
        ok, after = lines.after(cur)
        origin = origin[ok]
        mm = lines.role[after] == _MATMUL
        linked.append(origin[mm])
        matmuls.append(after[mm])
        on = lines.role[after] == _LAYOUT_OP
        cur, origin = after[on], origin[on]
        layout.append((origin, cur))
    reached = np.concatenate(linked)
    encodings = lines.names(reached)
    # The other inputs of a concatenation hand their thread to whatever is ready next: only the
    # last one's chain reaches the matmul. Encodings named like a linked one but for their
    # numbers (Keras' `category_encoding_3/one_hot`, feature columns' `C7_indicator/one_hot`)
    # are the same layer's on other features.
    unlinked = lines.names(enc) - encodings
    kinds = {_DIGITS.sub("#", e) for e in encodings}
    encodings |= {e for e in unlinked if _DIGITS.sub("#", e) in kinds}
    forward = lines.names(np.concatenate(matmuls))
    keys = set()
    for m in forward:
        op = m.rpartition(":")[0] or m
        keys |= {op, op.rpartition("/")[0] + "/MatMul"}  # a fused op's layer MatMul
    backward = {n for n in map(str, lines.categories)
                if _role(op_type_of(n)) == _MATMUL and _gradient_of(n, keys)} - forward
    grads = np.flatnonzero(np.isin(lines.name, [lines.categories.get_loc(b) for b in backward]))
    _, after = lines.after(grads)
    return {"encodings": encodings,
            "layout": lines.names(np.concatenate([r[np.isin(o, reached)] for o, r in layout])),
            "matmuls": forward, "backward": backward,
            "updates": lines.names(after[lines.role[after] == _APPLY])}, len(unlinked - encodings)


# HLO instructions that only move or reshape data between an encoding and its dot.
_XLA_LAYOUT = frozenset({"bitcast", "copy", "reshape", "transpose", "concatenate", "convert",
                         "slice", "broadcast"})


def _xla_counted(hlo: dict[str, HloOp]) -> dict[str, set[str]]:
    """The same parts in XLA-compiled steps, by thunk (HLO instruction) name: the dataflow is in
    the module (operands), the TF ops in each instruction's metadata. A matmul reading an
    encoding, through up to MAX_HOPS layout instructions, is a forward matmul or, named as a
    gradient (XLA keeps the tape's op names), a backward one; gradients of those by name too."""
    def encoding(name: str) -> bool:
        op = hlo.get(name)
        return op is not None and not op.has_dot and bool(_ENCODINGS.match(op_type_of(op.tf_op)))

    def layout(name: str) -> bool:
        op = hlo.get(name)
        return op is not None and not op.has_dot and (
            op.opcode in _XLA_LAYOUT
            or (op.opcode == "fusion" and bool(_LAYOUT.match(op_type_of(op.tf_op)))))

    out: dict[str, set[str]] = {part: set() for part in _PARTS}
    for name, op in hlo.items():
        if not op.has_dot:
            continue
        frontier: list[tuple[str, tuple[str, ...]]] = [(o, ()) for o in op.operands]
        found = False
        for _ in range(MAX_HOPS + 1):
            onward = []
            for operand, path in frontier:
                if encoding(operand):
                    out["encodings"].add(operand)
                    out["layout"] |= set(path)
                    found = True
                elif layout(operand):
                    onward += [(o, (*path, operand)) for o in hlo[operand].operands]
            frontier = onward
        if found:
            gradient = _TAPE in op.tf_op or _TF1_GRADIENTS in op.tf_op
            out["backward" if gradient else "matmuls"].add(name)
    keys = {hlo[m].tf_op.rpartition(":")[0] for m in out["matmuls"]} - {""}
    out["backward"] |= {n for n, op in hlo.items()
                        if op.has_dot and n not in out["matmuls"] and _gradient_of(op.tf_op, keys)}
    return out


def _label(name: str, hlo: dict[str, HloOp]) -> str:
    """A matmul as the evidence names it: a thunk with the TF op it came from."""
    return f"{name} ({_short(hlo[name].tf_op)})" if name in hlo else _short(name)


def _gradient_of(name: str, forward: set[str]) -> bool:
    """Whether a TF op is a gradient op of one of the `forward` ops (TF2 tape or TF1)."""
    op = name.rpartition(":")[0] or name
    if _TAPE in op:
        plain = op.replace(_TAPE, "", 1)
        return any(plain.startswith(f + "/") for f in forward)
    if _TF1_GRADIENTS in op:
        plain = op.replace(_TF1_GRADIENTS, "", 1)
        return any(plain.startswith(f + "_grad/") for f in forward)
    return False


_PARTS = {"encodings": "the encodings", "layout": "the layout ops between (concatenations, "
          "casts)", "matmuls": "the matmuls they feed", "backward": "those matmuls' gradients "
          "(a dense weight gradient each)", "updates": "the weights' dense updates"}


def _shares(ctx: Context, pool: pd.DataFrame, host_ops: pd.DataFrame,
            counted: dict[str, set[str]], on: str) -> tuple[dict[str, float], list[str]]:
    """Each part's saving (its share of the pool's busy time, of the time the pool covers; in a
    compiled step, of the thunks' and the time the modules ran; with kernels, plus the parts'
    host ops while no kernel runs) and its busy share as text."""
    covered = ctx.kernel_idle_share(pool, kernels=False)
    busy = float(pool["dur_ns"].sum())
    fractions: dict[str, float] = {}
    shares = []
    for key, label in _PARTS.items():
        rows = cat_mask(pool["name"], counted[key].__contains__)
        part_ns = float(pool["dur_ns"].to_numpy()[rows].sum())
        share = part_ns / busy if busy else 0.0
        fractions[key] = (compiled_share(ctx, part_ns) if on == "XLA thunks"
                          else share * covered)
        if share:
            shares.append(f"{label} {share:.0%}")
    if on == "kernels":
        every = set().union(*counted.values())
        fractions["host_exposed"] = ctx.kernel_idle_share(
            host_ops[cat_mask(host_ops["name"], every.__contains__)])
    return fractions, shares


def _short(name: str) -> str:
    """`StatefulPartitionedCall/functional_1/dense_3/MatMul:_MklMatMul` -> `dense_3/MatMul`."""
    op = name.rpartition(":")[0] or name
    return "/".join(op.split("/")[-2:])
