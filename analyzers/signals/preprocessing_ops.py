"""Feature-preprocessing ops by what they do, wherever they run (docs/trace-signals.md,
"Preprocessing ops in the step"): in the model they lengthen the step (`preprocessing_in_step`);
on tf.data's threads formatting integer ids as text to hash them is still work an integer hash
does for a fraction of the time (`input_preprocessing`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

# Grappler's fusion of AsString + StringToHashBucketFast (TF >= 2.7, CPUs included).
FUSED_HASH = "_TensorToHashBucketFast"
CAUSES: dict[str, frozenset[str]] = {
    "ints_as_strings": frozenset({"AsString", FUSED_HASH}),
    "string_ops": frozenset({
        "StringToHashBucketFast", "StringToHashBucketStrong", "StringToHashBucket",
        "StringSplit", "StringSplitV2", "StringToNumber", "Substr", "RegexReplace",
        "StaticRegexReplace", "RegexFullMatch", "StaticRegexFullMatch", "StringLower",
        "StringUpper", "StringStrip", "StringJoin", "ReduceJoin", "StringLength",
        "StringNGrams", "StringFormat", "UnicodeDecode", "UnicodeDecodeWithOffsets",
        "UnicodeTranscode", "DecodeCSV"}),
    "vocabulary_lookups": frozenset({"LookupTableFindV2", "LookupTableFind"}),
}
OP_TYPES = frozenset().union(*CAUSES.values())


def _scope(name: str) -> str:
    return name.rpartition(":")[0].rpartition("/")[0]


def causes_of(ops: pd.DataFrame) -> np.ndarray:
    """Each op's cause ("" for ops of none), from `name` and `op_type`. Unfused, a hash of a
    formatted id runs as its own op in the scope of the AsString that feeds it (a Hashing
    layer's, a feature column's): it is that cause too."""
    types = ops["op_type"].astype(str).to_numpy().astype(str)
    cause_of = np.full(len(ops), "", dtype=object)
    for cause, kinds in CAUSES.items():
        cause_of[np.isin(types, list(kinds))] = cause
    names = ops["name"].astype(str).to_numpy()
    formatted = {_scope(n) for n in names[types == "AsString"]}
    if formatted:
        hashes = np.flatnonzero(np.char.startswith(types, "StringToHashBucket"))
        paired = np.array([_scope(n) in formatted for n in names[hashes]], dtype=bool)
        cause_of[hashes[paired]] = "ints_as_strings"
    return cause_of
