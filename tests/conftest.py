"""Shared pytest configuration. Kept light on purpose: no TensorFlow import, no autouse fixtures.

Markers (pyproject.toml): `slow` = end-to-end tests; CI runs them too (`make test-fast` skips them).
"""
