"""Scoring: the processors, the metrics they compute, and what they compute them with
(the normalized agent trace, embedders, the LLM judge), plus the score attacher."""
