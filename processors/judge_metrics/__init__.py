"""`judge_metrics` processor (`processor`), and the LLM judge it and the other judging
processors ask: the client, its budget and cache, the prompts, rubrics and planning."""
