"""The endpoint's call loop without a server: an exchange that fails as it is told, run
on an event loop (`call`) and on a thread (`call_sync`). Outages and real servers are
the judge's and the embedder's tests."""

from __future__ import annotations

import asyncio
import logging

import openai
import pytest

from spanscore.processors.openai_endpoint import client as endpoint_client
from spanscore.processors.openai_endpoint.breaker import BreakerState
from spanscore.processors.openai_endpoint.client import Endpoint, Exchange, Failure
from spanscore.processors.openai_endpoint.retry import GiveUp, RetryPolicy


class GaveUp(Exception):
    pass


class Scripted(Exchange[str]):
    """Fails with each of `script` in turn ("error", "unusable", "refused"), then answers."""

    def __init__(self, *script: str, asynchronous: bool):
        self.script = list(script)
        self.asynchronous = asynchronous

    def send(self, client):
        step = self.script.pop(0) if self.script else "answer"
        if step in ("error", "refused"):
            raise openai.OpenAIError(step)
        return self._later(step) if self.asynchronous else step

    async def _later(self, step):
        return step

    def classify(self, error):
        return None if str(error) == "refused" else Failure(str(error), retryable=True)

    def read(self, response):
        return Failure("unusable answer", retryable=True) if response == "unusable" else f"answered: {response}"

    def gave_up(self, failure, why):
        return GaveUp(f"{why.name} after {self.requests}: {failure.message}")

    def unreachable(self, outage):
        raise AssertionError("no outage here")


def endpoint(max_retries: int = 2) -> Endpoint:
    return Endpoint(
        "test server",
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        log=logging.getLogger("test"),
        what="test request",
        retry=RetryPolicy(max_retries, initial_backoff_s=0.001, max_backoff_s=0.001),
    )


def run(ep: Endpoint, *script: str, on_loop: bool) -> str:
    if on_loop:
        return asyncio.run(ep.call(Scripted(*script, asynchronous=True)))
    return ep.call_sync(Scripted(*script, asynchronous=False))


@pytest.mark.parametrize("on_loop", [True, False], ids=["call", "call_sync"])
def test_both_paths_retry_the_same_way(on_loop):
    ep = endpoint()
    assert run(ep, "error", "unusable", on_loop=on_loop) == "answered: answer"
    stats = ep.stats()
    assert (stats.requests, stats.retries) == (3, 2)
    with pytest.raises(GaveUp, match=f"^{GiveUp.RETRIES_SPENT.name} after 3: error$"):
        run(ep, "error", "error", "error", on_loop=on_loop)
    assert ep.breaker.opened == 0  # failures that are not outages say the server is up


@pytest.mark.parametrize("on_loop", [True, False], ids=["call", "call_sync"])
def test_a_refused_request_goes_again_at_once_without_spending_a_retry(on_loop):
    ep = endpoint(max_retries=0)
    assert run(ep, "refused", "refused", on_loop=on_loop) == "answered: answer"
    assert (ep.stats().requests, ep.stats().retries) == (3, 0)


def test_call_sync_refuses_a_wait_on_an_event_loop(monkeypatch):
    async def sleep_on_a_loop(self, seconds):
        await asyncio.sleep(0)  # suspends: hands control to the loop that would drive it

    monkeypatch.setattr(endpoint_client._Blocking, "sleep", sleep_on_a_loop)
    with pytest.raises(RuntimeError, match="waited on an event loop"):
        endpoint().call_sync(Scripted("error", asynchronous=False))


async def test_a_probe_cancelled_while_it_waits_for_a_slot_lets_the_next_call_probe():
    server = Endpoint(
        "test server",
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        log=logging.getLogger("test"),
        what="test request",
        retry=RetryPolicy(2, initial_backoff_s=0.001, max_backoff_s=0.001),
        max_concurrency=1,
    )
    for _ in range(server.breaker.failure_threshold):
        server.breaker.failed(False, "no connection")
    taken = await server.limit.acquire()  # every slot in use
    await asyncio.sleep(0.01)  # past the probe delay
    probe = asyncio.create_task(server.call(Scripted(asynchronous=True)))
    await asyncio.sleep(0.01)
    assert server.breaker.state is BreakerState.HALF_OPEN  # it goes as the probe, once it has a slot
    probe.cancel()  # as a scoring given up cancels its judge calls
    with pytest.raises(asyncio.CancelledError):
        await probe
    assert server.breaker.state is BreakerState.OPEN  # not half-open for good: the next call probes
    server.limit.release(taken, None)
    assert await asyncio.wait_for(server.call(Scripted(asynchronous=True)), 1) == "answered: answer"
