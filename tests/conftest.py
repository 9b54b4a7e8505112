"""Shared pytest configuration. Kept light on purpose: no TensorFlow import, no autouse fixtures.

Markers (pyproject.toml): `slow` = end-to-end tests; CI runs them too (`make test-fast` skips them).
"""

import os

import pytest


@pytest.fixture(scope="session")
def dataset_cache(tmp_path_factory) -> str:
    """One reference-trainer dataset cache for every test session's trainer runs: each record
    format is generated once (10-22 s each on 2 cores), not once per test module that trains.
    RECADVISOR_TEST_CACHE reuses a cache across sessions."""
    return os.environ.get("RECADVISOR_TEST_CACHE", str(tmp_path_factory.mktemp("cache")))
