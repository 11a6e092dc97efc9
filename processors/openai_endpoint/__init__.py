"""Calling an OpenAI-compatible server, for the judge and the OpenAI embedder alike.

- `breaker`: the circuit breaker that holds calls through an outage;
- `retry`: retry timing, and which failures are retried or are an outage;
- `client`: an endpoint's settings, its SDK clients, and the one loop that runs every
  call through the breaker and the retry policy.
"""
