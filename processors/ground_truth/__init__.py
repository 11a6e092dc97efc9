"""Ground truth for the agent-evaluation metrics: eval-suite datasets of cases."""
