"""The collector's full garbage collections: garbage held in a reference cycle is freed
within an interval even when CPython's own passes would never reach it."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from spanscore.pipeline.gc_tuning import collect_cycles_forever


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def garbage_cycle() -> weakref.ref:
    first, second = Node(), Node()
    first.other, second.other = second, first
    return weakref.ref(first)


@pytest.fixture
def no_automatic_passes():
    was_enabled = gc.isenabled()
    gc.disable()
    yield
    if was_enabled:
        gc.enable()


async def test_a_cycle_is_freed_by_the_next_full_pass(no_automatic_passes):
    sweeper = asyncio.create_task(collect_cycles_forever(interval_s=0.05))
    try:
        freed = garbage_cycle()
        for _ in range(100):
            if freed() is None:
                break
            await asyncio.sleep(0.02)
        assert freed() is None
    finally:
        sweeper.cancel()
        await asyncio.gather(sweeper, return_exceptions=True)


async def test_without_it_the_cycle_stays(no_automatic_passes):
    kept = garbage_cycle()
    await asyncio.sleep(0.2)
    assert kept() is not None
    gc.collect()
    assert kept() is None


async def test_it_stops_when_cancelled():
    sweeper = asyncio.create_task(collect_cycles_forever(interval_s=0.01))
    await asyncio.sleep(0.05)
    sweeper.cancel()
    await asyncio.gather(sweeper, return_exceptions=True)
    assert sweeper.cancelled()
