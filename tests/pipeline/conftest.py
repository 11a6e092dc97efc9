from tests.support.pipeline_rig import rig_for  # noqa: F401  (the in-memory pipeline fixture)
