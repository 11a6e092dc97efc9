from __future__ import annotations

import pytest

from spanscore.processors.metrics.coherence import default_embedder


@pytest.fixture
def fresh_default_embedder():
    """The default embedder is loaded once per process: forget it before and after."""
    default_embedder.cache_clear()
    yield
    default_embedder.cache_clear()
