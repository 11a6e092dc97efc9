"""LLM-as-judge: the judge client and the seven judge metrics' prompts and planning."""
