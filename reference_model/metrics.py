"""Evaluation metrics (no scikit-learn dependency for one formula)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """ROC AUC by the Mann-Whitney rank formula; ties get average ranks."""
    labels = np.asarray(labels).astype(bool).ravel()
    pos = int(labels.sum())
    neg = labels.size - pos
    if pos == 0 or neg == 0:
        raise ValueError("AUC needs both positive and negative labels")
    ranks = pd.Series(np.asarray(scores, dtype=np.float64).ravel()).rank().to_numpy()
    return float((ranks[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))
