from tests.support.openai_server import openai_server  # noqa: F401  (the loopback OpenAI server fixture)
from tests.support.pipeline_rig import rig_for  # noqa: F401  (the in-memory pipeline fixture)
