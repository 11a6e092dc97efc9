"""Failure localization: where in a run the agent went wrong, on which span, and why."""
