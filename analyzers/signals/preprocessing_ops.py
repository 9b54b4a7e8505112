"""Feature-preprocessing ops by what they do, wherever they run (docs/trace-signals.md,
"Preprocessing ops in the step"): in the model they lengthen the step (`preprocessing_in_step`);
on tf.data's threads formatting integer ids as text to hash them is still work an integer hash
does for a fraction of the time (`input_preprocessing`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analyzers.events import op_type_of

# Grappler's fusion of AsString + StringToHashBucketFast (TF >= 2.7, CPUs included).
FUSED_HASH = "_TensorToHashBucketFast"
_AS_STRING = "AsString"
_HASHES = frozenset({"StringToHashBucketFast", "StringToHashBucketStrong", "StringToHashBucket"})
CAUSES: dict[str, frozenset[str]] = {
    "ints_as_strings": frozenset({FUSED_HASH}),  # and AsString/hash pairs, see cause_codes
    "string_ops": frozenset({
        _AS_STRING, *_HASHES, "StringSplit", "StringSplitV2", "StringToNumber", "Substr",
        "RegexReplace", "StaticRegexReplace", "RegexFullMatch", "StaticRegexFullMatch",
        "StringLower", "StringUpper", "StringStrip", "StringJoin", "ReduceJoin", "StringLength",
        "StringNGrams", "StringFormat", "UnicodeDecode", "UnicodeDecodeWithOffsets",
        "UnicodeTranscode", "DecodeCSV"}),
    "vocabulary_lookups": frozenset({"LookupTableFindV2", "LookupTableFind"}),
}
CAUSE_IDS = tuple(CAUSES)
OP_TYPES = frozenset().union(*CAUSES.values())


def is_preprocessing_op(name: str) -> bool:
    """Whether an op event (`scope/op:Type`) is one of these ops."""
    return op_type_of(name) in OP_TYPES


def _scope(name: str) -> str:
    return name.rpartition(":")[0].rpartition("/")[0]


def cause_codes(names: pd.Series) -> np.ndarray:
    """Per row of a categorical `names` column, the index of its cause in CAUSE_IDS (-1: none),
    worked out once per distinct name. Unfused, formatting an id and hashing it are two ops in
    one name scope (a Hashing layer's, a feature column's): an AsString and a StringToHashBucket*
    sharing a scope are `ints_as_strings`; alone, either is a string op like any other."""
    cats = [str(c) for c in names.cat.categories]
    types = [op_type_of(c) for c in cats]
    table = np.full(len(cats) + 1, -1, dtype=np.int8)  # the last slot reads code -1 (no name)
    for i, t in enumerate(types):
        for k, kinds in enumerate(CAUSES.values()):
            if t in kinds:
                table[i] = k
    if not (table >= 0).any():
        # Most traces have no such op: a fill, not a gather over every row.
        return np.full(len(names), -1, dtype=np.int8)
    formats = [i for i, t in enumerate(types) if t == _AS_STRING]
    hashes = [i for i, t in enumerate(types) if t in _HASHES]
    if formats and hashes:
        # Pairs among the names the rows hold (the categories may be a whole trace's).
        present = np.zeros(len(cats) + 1, dtype=bool)
        present[names.array.codes] = True
        scopes = {i: _scope(cats[i]) for i in formats + hashes if present[i]}
        formatted = {scopes[i] for i in formats if i in scopes}
        hashed = {scopes[i] for i in hashes if i in scopes}
        for i, scope in scopes.items():
            if scope in (hashed if types[i] == _AS_STRING else formatted):
                table[i] = CAUSE_IDS.index("ints_as_strings")
    return table[names.array.codes]
