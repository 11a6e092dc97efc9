"""Embedder throughput: texts/s and milliseconds per trace, cold and warm.

    python bench/embedders.py [--traces 200] [--rounds 3] [--batch 64]

A trace is two texts, its input and its output, of ~60 words each, drawn from an
agent-support vocabulary with Zipf-like word frequencies (so words repeat the way they
do in real traffic). For each embedder (static and hashing always; MiniLM when the
`spanscore[minilm]` extra is installed), in one process:
- cold: a new embedder's first trace, including everything it does once (MiniLM:
  importing torch and sentence-transformers and loading the weights);
- warm, per trace: one `embed_sync` call per trace (a caller embedding trace by trace);
- warm, batched: all texts in calls of `--batch` texts (the pipeline embeds a batch of
  traces in one call);
- cached: the same traces again through `CachedEmbedder` (every text a hit).
Warm figures are the best of `--rounds` rounds. The embedders run uncached except in
the last line, so the figures are the embedders' own cost.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.processors.embedders.base import Embedder  # noqa: E402
from spanscore.processors.embedders.cache import CachedEmbedder  # noqa: E402
from spanscore.processors.embedders.hashing import HashingEmbedder  # noqa: E402
from spanscore.processors.embedders.minilm import MiniLMEmbedder, missing_modules  # noqa: E402
from spanscore.processors.embedders.static import StaticEmbedder  # noqa: E402

WORDS_PER_TEXT = 60
_VOCABULARY = """
the a to and of is in your for it on that order this we with be can you have i will
are not please my was as at by from an our or if refund delivery shipping account
package tracking number customer support agent tool call weather invoice payment card
charged twice cancel subscription password reset email address update warehouse
carrier delayed yesterday tomorrow monday thursday week days status shipped returned
label item product price discount code coupon expired store policy exchange size color
damaged missing replacement request ticket escalate manager confirm verify identity
phone message reply thanks sorry help issue problem error failed retry again later
search database query result found records user asked answer plan step first then
finally lookup_order get_weather send_email create_ticket paris london berlin lyon
depot courier dpd ups fedex estimated arrival window signature required left door
""".split()


def corpus(traces: int, seed: int = 1) -> list[tuple[str, str]]:
    rng = np.random.default_rng(seed)
    ranks = np.arange(1, len(_VOCABULARY) + 1)
    weights = 1.0 / ranks
    weights /= weights.sum()

    def text() -> str:
        picks = rng.choice(len(_VOCABULARY), size=WORDS_PER_TEXT, p=weights)
        words = [_VOCABULARY[i] for i in picks]
        # Order numbers make every text distinct, as real traces are.
        words[int(rng.integers(WORDS_PER_TEXT))] = f"#{int(rng.integers(10**6))}"
        return " ".join(words).capitalize() + "."

    return [(text(), text()) for _ in range(traces)]


def best_seconds(work: Callable[[], object], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def report(label: str, seconds: float, texts: int, traces: int) -> None:
    print(f"  {label:<34}{texts / seconds:>12,.0f}{1000 * seconds / traces:>12.3f}")


def run(name: str, make: Callable[[], Embedder], traces: Sequence[tuple[str, str]], rounds: int, batch: int) -> None:
    print(f"{name}")
    print(f"  {'':<34}{'texts/s':>12}{'ms/trace':>12}")
    started = time.perf_counter()
    embedder = make()
    embedder.embed_sync(list(traces[0]))
    cold = time.perf_counter() - started
    print(f"  {'cold (first trace, incl. load)':<34}{'':>12}{1000 * cold:>12.1f}")
    load_seconds = getattr(embedder, "load_seconds", None)
    if load_seconds is not None:
        print(f"  {'  of which import + model load':<34}{'':>12}{1000 * load_seconds:>12.1f}")

    texts = [text for pair in traces for text in pair]

    def per_trace() -> None:
        for pair in traces:
            embedder.embed_sync(list(pair))

    def batched() -> None:
        for start in range(0, len(texts), batch):
            embedder.embed_sync(texts[start : start + batch])

    report("warm, one call per trace", best_seconds(per_trace, rounds), len(texts), len(traces))
    report(f"warm, batches of {batch}", best_seconds(batched, rounds), len(texts), len(traces))

    cached = CachedEmbedder(embedder, max_entries=len(texts))
    for pair in traces:
        cached.embed_sync(list(pair))

    def hits() -> None:
        for pair in traces:
            cached.embed_sync(list(pair))

    report("cached (all hits), per trace", best_seconds(hits, rounds), len(texts), len(traces))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args(argv)
    traces = corpus(args.traces)
    words = np.mean([len(text.split()) for pair in traces for text in pair])
    print(f"{len(traces)} traces of 2 texts, {words:.0f} words per text\n")
    run("static (MiniLM's distilled token table, 128 dimensions)", StaticEmbedder, traces, args.rounds, args.batch)
    print()
    run("hashing (lexical, 1024 dimensions)", HashingEmbedder, traces, args.rounds, args.batch)
    missing = missing_modules()
    if missing:
        print(f"\nminilm: skipped, the spanscore[minilm] extra is not installed (missing {', '.join(missing)})")
    else:
        print()
        run("minilm (all-MiniLM-L6-v2, CPU)", MiniLMEmbedder, traces, args.rounds, args.batch)


if __name__ == "__main__":
    main()
