"""Optuna search over the reference trainer's knobs, warm-started from the findings."""
