"""`recadvisor data`: write a synthetic Criteo-like dataset (or convert real Criteo TSV files)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from reference_model.data.records import COMPRESSIONS, FORMATS
from reference_model.schema import DEFAULT_CARDINALITIES, Schema


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers: {text!r}") from None


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "data",
        help="write a synthetic Criteo-like dataset as sharded TFRecords",
        description="Write a synthetic Criteo-like dataset (13 heavy-tailed counts, 26 Zipf ids, "
        "a learnable label) or convert real Criteo TSV files, as sharded TFRecords with a "
        "manifest.json.",
    )
    p.add_argument("--out", type=Path, required=True, help="output directory")
    p.add_argument("--examples", type=int, default=131_072, help="train examples")
    p.add_argument("--eval-examples", type=int, default=32_768, help="held-out examples")
    p.add_argument("--format", choices=FORMATS, default="prebatched",
                   help="one tf.train.Example per record, or one whole batch per record")
    p.add_argument("--rows-per-record", type=int, default=1024, help="rows per prebatched record")
    p.add_argument("--compression", choices=COMPRESSIONS, default="none")
    p.add_argument("--shards", type=int, default=16, help="train files (eval gets a quarter)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--zipf-a", type=float, default=1.2, help="id skew (higher: hotter rows)")
    p.add_argument("--payload-bytes", type=int, default=4096,
                   help="opaque bytes per example, as production logs carry (0: Criteo only)")
    p.add_argument("--cardinalities", type=_ints, help="26 comma-separated table sizes")
    p.add_argument("--criteo-tsv", type=Path, nargs="+", metavar="FILE",
                   help="convert these Criteo TSV files instead of generating (last 10%% = eval)")


def run(args: argparse.Namespace) -> int:
    from reference_model.data.cache import DatasetSpec, generate_dataset
    from reference_model.data.writer import write_dataset

    if args.examples <= 0 or args.eval_examples < 0 or args.shards <= 0:
        raise ValueError("--examples and --shards must be positive, --eval-examples >= 0")
    out = args.out
    if (out / "manifest.json").exists():
        raise ValueError(f"{out} already holds a dataset; choose another --out or delete it")
    schema = Schema(cardinalities=args.cardinalities or DEFAULT_CARDINALITIES,
                    payload_bytes=args.payload_bytes)
    t = time.perf_counter()
    if args.criteo_tsv:
        from reference_model.data.criteo_tsv import read_criteo_tsv

        cols = read_criteo_tsv(args.criteo_tsv, schema)
        n = len(cols["label"])
        cut = n - max(1, n // 10) if n > 1 else n
        splits = {"train": {k: v[:cut] for k, v in cols.items()},
                  "eval": {k: v[cut:] for k, v in cols.items()}}
        manifest = write_dataset(
            out, splits, schema, fmt=args.format, rows_per_record=args.rows_per_record,
            compression=args.compression, num_shards=args.shards,
            generator={"source": "criteo_tsv", "files": [str(f) for f in args.criteo_tsv]},
            progress=True,
        )
    else:
        spec = DatasetSpec(
            schema=schema, fmt=args.format, rows_per_record=args.rows_per_record,
            compression=args.compression, num_examples=args.examples,
            eval_examples=args.eval_examples, num_shards=args.shards, seed=args.seed,
            zipf_a=args.zipf_a,
        )
        manifest = generate_dataset(out, spec, progress=True)
    files = sum(len(s["files"]) for s in manifest.splits.values())
    size = sum(f["bytes"] for s in manifest.splits.values() for f in s["files"])
    counts = ", ".join(f"{k} {v['num_examples']:,}" for k, v in manifest.splits.items())
    print(f"wrote {counts} examples in {files} files ({size / 1e6:,.1f} MB, {manifest.format}, "
          f"{manifest.compression}) to {out} in {time.perf_counter() - t:.1f} s")
    return 0
