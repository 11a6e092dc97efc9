"""Hypothesis profiles for the fuzz tests.

`ci` (the default) is derandomized: the same examples on every run, so a red run is a
regression and not a lucky draw. `explore` draws fresh examples each run and keeps the
failing ones in `.hypothesis/` to replay: `HYPOTHESIS_PROFILE=explore pytest tests/fuzz`.
Example counts stay on each test (`max_examples`), sized so the folder runs in well
under a minute on two cores.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "explore", derandomize=False, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
