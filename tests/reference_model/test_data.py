import dataclasses
import json

import numpy as np
import pytest

from reference_model.data.cache import DatasetSpec, ensure_dataset, generate_dataset
from reference_model.data.criteo_tsv import read_criteo_tsv
from reference_model.data.manifest import Manifest
from reference_model.data.synthetic import generate
from reference_model.metrics import roc_auc
from reference_model.schema import Schema

SMALL = Schema(cardinalities=(50, 3000, 7, 900, 12, 400) + (20,) * 20, payload_bytes=16)


def test_generator_is_deterministic_per_seed():
    a, b, c = generate(SMALL, 2000, 1), generate(SMALL, 2000, 1), generate(SMALL, 2000, 2)
    for k in a:
        assert np.array_equal(a[k], b[k])
    assert not np.array_equal(a["cat"], c["cat"])


def test_ids_in_range_and_zipf_skewed():
    cols = generate(Schema(), 50_000, 0)
    cards = np.array(Schema().cardinalities)
    assert (cols["cat"] >= 0).all() and (cols["cat"] < cards).all()
    big = int(np.argmax(cards))
    _, counts = np.unique(cols["cat"][:, big], return_counts=True)
    top = np.sort(counts)[::-1][: max(1, cards[big] // 100)].sum()
    assert top / 50_000 > 0.3  # the hottest 1% of rows take a large share of lookups
    assert (cols["dense"] >= 0).all() and cols["dense"].max() > 100  # heavy-tailed counts


def test_payload_tokens_are_zipf_and_compress_like_logs():
    """The payload's 8-byte tokens follow Zipf(1.1) over 4,096 tokens (drawn from a 2^20-slot
    table) and compress ~3x with GZIP: the `gzip` preset's decompression cost rests on it."""
    import zlib

    n = 2000
    payload = generate(dataclasses.replace(Schema(), payload_bytes=4096), n, 0)["payload"]
    assert payload.shape == (n, 4096) and payload.dtype == np.uint8
    _, counts = np.unique(payload.reshape(-1, 8).view(np.uint64), return_counts=True)
    counts = np.sort(counts)[::-1]
    w = 1.0 / np.arange(1, 4097) ** 1.1
    expected = w / w.sum()
    assert counts.sum() == n * 512 and len(counts) > 3500  # the tail is drawn too
    np.testing.assert_allclose(counts[:20] / counts.sum(), expected[:20], rtol=0.05)
    raw = payload[:500].tobytes()
    assert 2.6 < len(raw) / len(zlib.compress(raw, 6)) < 3.4


def test_label_rate_and_learnable_signal():
    cols = generate(Schema(), 40_000, 0)
    assert 0.1 < cols["label"].mean() < 0.4
    # A logistic regression on log1p(dense) alone, trained on one half, scored on the other.
    x = np.log1p(cols["dense"])
    x = (x - x.mean(0)) / x.std(0)
    x = np.hstack([x, np.ones((len(x), 1))])
    y = cols["label"]
    w = np.zeros(x.shape[1])
    for _ in range(300):
        p = 1 / (1 + np.exp(-x[:20_000] @ w))
        w -= 0.5 * x[:20_000].T @ (p - y[:20_000]) / 20_000
    assert roc_auc(y[20_000:], x[20_000:] @ w) > 0.6
    # and a shuffled label has no signal: the check above can fail.
    assert roc_auc(np.random.default_rng(0).permutation(y[20_000:]), x[20_000:] @ w) < 0.55


def _read_all(manifest: Manifest, split: str) -> dict:
    import tensorflow as tf

    from reference_model.data.records import feature_spec, parse_single

    ds = tf.data.TFRecordDataset(manifest.files(split),
                                 compression_type="GZIP" if manifest.compression == "gzip" else "")
    keys = ["label", "I1", "I13", "C1", "C26", "payload"]
    if manifest.format == "example":
        rows = [parse_single(s, manifest.schema) for s in ds]
        # dtype=object: NumPy's fixed-width bytes would strip the payload's trailing NULs.
        return {k: np.array([r[k].numpy() for r in rows], dtype=object) for k in keys}
    spec = feature_spec(manifest.schema, "prebatched", manifest.rows_per_record)
    parsed = [tf.io.parse_single_example(s, spec) for s in ds]
    return {k: np.concatenate([p[k].numpy() for p in parsed]).astype(object) for k in keys}


@pytest.mark.parametrize("compression", ["none", "gzip"])
def test_per_example_and_prebatched_yield_same_examples(tmp_path, compression):
    kw = dict(schema=SMALL, compression=compression, num_examples=2048, eval_examples=512,
              num_shards=3, seed=5)
    ex = generate_dataset(tmp_path / "ex", DatasetSpec(fmt="example", rows_per_record=1, **kw))
    pb = generate_dataset(tmp_path / "pb", DatasetSpec(fmt="prebatched", rows_per_record=256, **kw))
    a, b = _read_all(ex, "train"), _read_all(pb, "train")
    truth = generate(SMALL, 2048, 5)
    for k in a:
        assert np.array_equal(a[k], b[k]), k
    assert np.array_equal(a["C26"], truth["cat"][:, 25])
    assert np.array_equal(a["I13"], truth["dense"][:, 12])
    assert a["payload"][3] == truth["payload"][3].tobytes()
    assert ex.num_examples("eval") == 512 and pb.num_examples("eval") == 512


def test_prebatched_drops_partial_record(tmp_path):
    m = generate_dataset(tmp_path / "d", DatasetSpec(
        schema=SMALL, fmt="prebatched", rows_per_record=300, compression="none",
        num_examples=1000, eval_examples=0, num_shards=2, seed=0))
    assert m.num_examples("train") == 900
    assert "eval" not in m.splits


def test_manifest_round_trip_and_errors(tmp_path):
    m = generate_dataset(tmp_path / "d", DatasetSpec(
        schema=SMALL, fmt="example", rows_per_record=1, compression="none", num_examples=300,
        eval_examples=100, num_shards=2, seed=0))
    back = Manifest.load(tmp_path / "d")
    assert back.schema == SMALL and back.splits == m.splits
    with pytest.raises(FileNotFoundError, match="not found"):
        Manifest.load(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no manifest.json"):
        Manifest.load(tmp_path)
    (tmp_path / "d" / "manifest.json").write_text("{broken")
    with pytest.raises(ValueError, match="corrupt dataset manifest"):
        Manifest.load(tmp_path / "d")
    m.save(tmp_path / "d")
    (tmp_path / "d" / m.splits["train"]["files"][0]["name"]).unlink()
    with pytest.raises(FileNotFoundError, match="missing"):
        Manifest.load(tmp_path / "d")


def test_ensure_dataset_caches(tmp_path):
    spec = DatasetSpec(schema=SMALL, fmt="prebatched", rows_per_record=128, compression="none",
                       num_examples=512, eval_examples=128, num_shards=2, seed=0)
    p1 = ensure_dataset(tmp_path, spec, progress=False)
    stamp = (p1 / "manifest.json").stat().st_mtime_ns
    p2 = ensure_dataset(tmp_path, spec, progress=False)
    assert p1 == p2 and (p2 / "manifest.json").stat().st_mtime_ns == stamp
    p3 = ensure_dataset(tmp_path, dataclasses.replace(spec, compression="gzip"), progress=False)
    assert p3 != p1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".building")]


def test_criteo_tsv_reader(tmp_path):
    row1 = ["1", "5", "", "3", "-1"] + ["0"] * 9 + ["68fd1e64", ""] + ["a" * 8] * 24
    row0 = ["0"] + ["1"] * 13 + ["ffffffff"] * 26
    path = tmp_path / "day_0.tsv"
    path.write_text("\t".join(row1) + "\n" + "\t".join(row0) + "\n")
    cols = read_criteo_tsv([path], SMALL)
    assert cols["label"].tolist() == [1.0, 0.0]
    assert cols["dense"][0, :4].tolist() == [5.0, 0.0, 3.0, 0.0]  # empty -> 0, negative -> 0
    assert cols["cat"][0, 1] == 0  # empty id -> bucket 0
    assert (cols["cat"] < np.array(SMALL.cardinalities)).all()
    assert cols["cat"][1, 0] == read_criteo_tsv([path], SMALL)["cat"][1, 0]  # stable hashing
    (tmp_path / "bad.tsv").write_text("1\t2\t3\n")
    with pytest.raises(ValueError, match="expected 40"):
        read_criteo_tsv([tmp_path / "bad.tsv"], SMALL)
    with pytest.raises(FileNotFoundError):
        read_criteo_tsv([tmp_path / "none.tsv"], SMALL)


def test_data_cli(tmp_path, capsys):
    from recadvisor.cli import main

    out = tmp_path / "ds"
    rc = main(["data", "--out", str(out), "--examples", "1024", "--eval-examples", "256",
               "--rows-per-record", "256", "--shards", "2", "--payload-bytes", "8"])
    assert rc == 0
    assert "wrote train 1,024, eval 256 examples" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["format"] == "prebatched" and manifest["schema"]["payload_bytes"] == 8
    assert main(["data", "--out", str(out)]) == 2  # refuses to overwrite
    assert "already holds a dataset" in capsys.readouterr().err
    assert main(["data", "--out", str(tmp_path / "x"), "--cardinalities", "1,2"]) == 2
