"""Single-process baseline of the preprocessing (pyarrow + numpy), for benchmarks/preprocess.py.

Same rules as preproc_spark3 (docs/preprocessing.md): validate lines (malformed ones counted and
written to quarantine.jsonl), dictionary over the training days with frequency threshold T, ids by
descending count then value, log(max(x,0)+1) numericals, eval day halved by line count, train
shuffled (numpy permutation: a different permutation than Spark's, the same amount of work), written
through the data layer's SplitBinaryWriter. Everything is held in memory: it is the strongest simple
single-process version, not a scalable one.

    python -m benchmarks.preprocess_baseline <raw_dir> <out_dir> --threshold 3 --train_days 0-1 --eval_day 2
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter
from dlrm.data.synthetic.criteo import NUM_CATEGORICAL, NUM_NUMERICAL
from preproc_spark3.chunks import first_half_lines
from preproc_spark3.config import RAW_FIELD_COUNT, parse_days
from preproc_spark3.dictionary import build_feature, lookup_ids
from preproc_spark3.validate import HEX_PATTERN, INTEGER_PATTERN

_HEX_VALUE = np.full(256, 0, dtype=np.uint32)
for _c in "0123456789abcdef":
    _HEX_VALUE[ord(_c)] = int(_c, 16)
    _HEX_VALUE[ord(_c.upper())] = int(_c, 16)


def read_lines(path: Path) -> pa.Array:
    """Every line of a file, in order, as one string array (empty lines kept)."""
    table = pacsv.read_csv(
        path, read_options=pacsv.ReadOptions(column_names=["line"], block_size=64 << 20),
        parse_options=pacsv.ParseOptions(delimiter="\x01", quote_char=False, escape_char=False,
                                         ignore_empty_lines=False),
        convert_options=pacsv.ConvertOptions(column_types={"line": pa.string()}, strings_can_be_null=False))
    return table.column("line").combine_chunks()


def parse_day(path: Path, quarantine) -> dict[str, np.ndarray]:
    lines = read_lines(path)
    fields = pc.split_pattern(lines, "\t")
    good = pc.equal(pc.list_value_length(fields), RAW_FIELD_COUNT)
    flat = pc.list_flatten(pc.filter(fields, good))
    columns = [pc.take(flat, pa.array(np.arange(i, len(flat), RAW_FIELD_COUNT))) for i in range(RAW_FIELD_COUNT)]
    ok = pc.is_in(columns[0], pa.array(["0", "1"]))
    for i in range(1, RAW_FIELD_COUNT):
        pattern = INTEGER_PATTERN if i <= NUM_NUMERICAL else HEX_PATTERN
        ok = pc.and_(ok, pc.or_(pc.equal(columns[i], ""), pc.match_substring_regex(columns[i], pattern)))
    ok = ok.to_numpy(zero_copy_only=False)
    line_numbers = np.flatnonzero(good.to_numpy(zero_copy_only=False)) + 1
    bad_numbers = np.sort(np.concatenate([np.flatnonzero(~good.to_numpy(zero_copy_only=False)) + 1,
                                          line_numbers[~ok]]))
    for number in bad_numbers:
        quarantine.write(json.dumps({"source_file": str(path), "line_number": int(number),
                                     "raw_line": lines[int(number) - 1].as_py()}) + "\n")
    keep = pa.array(ok)
    columns = [pc.filter(c, keep) for c in columns]
    ints = []
    for c in columns[1:1 + NUM_NUMERICAL]:
        ints.append(pc.fill_null(pc.cast(pc.if_else(pc.equal(c, ""), None, c), pa.int64()), 0).to_numpy())
    cats = []
    for c in columns[1 + NUM_NUMERICAL:]:
        padded = pc.utf8_lpad(c, 8, "0")
        raw = np.frombuffer(padded.buffers()[2], dtype=np.uint8)[: 8 * len(padded)].reshape(-1, 8)
        nibbles = _HEX_VALUE[raw]
        value = np.zeros(len(padded), dtype=np.int64)
        for k in range(8):
            value = (value << 4) | nibbles[:, k]
        value[pc.equal(c, "").to_numpy(zero_copy_only=False)] = -1  # missing
        cats.append(value)
    return {"label": pc.cast(columns[0], pa.int8()).to_numpy(zero_copy_only=False),
            "ints": np.stack(ints, axis=1).astype(np.int64), "cats": np.stack(cats, axis=1),
            "line": line_numbers[ok], "lines_in_file": len(lines), "malformed": len(bad_numbers)}


def dictionary(values: np.ndarray, threshold: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept values sorted ascending, with their ids (the pipeline's rule: descending count, ties by value)."""
    present = values[values >= 0]
    built = build_feature([np.unique(present, return_counts=True)], threshold)
    return built.values, built.ids


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("raw_dir")
    p.add_argument("out_dir")
    p.add_argument("--threshold", type=int, default=0)
    p.add_argument("--train_days", default="0-22")
    p.add_argument("--eval_day", type=int, default=23)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--chunk_rows", type=int, default=262_144)
    return p.parse_args(argv)


def stacked(parts: list[dict], order: Optional[np.ndarray] = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(label, ints, cats) of several parsed days, one after the other, rows in `order` if given."""
    label = np.concatenate([p["label"] for p in parts])
    ints = np.concatenate([p["ints"] for p in parts])
    cats = np.concatenate([p["cats"] for p in parts])
    if order is not None:
        label, ints, cats = label[order], ints[order], cats[order]
    return label, ints, cats


def write_split(writer: SplitBinaryWriter, arrays: tuple, maps: list, chunk_rows: int) -> int:
    """Transform and write one split's rows chunk by chunk; returns its row count."""
    label, ints, cats = arrays
    for s in range(0, len(label), chunk_rows):
        e = s + chunk_rows
        numerical = np.log(np.maximum(ints[s:e], 0).astype(np.float64) + 1.0).astype(np.float32)
        writer.write(label[s:e], numerical, [lookup_ids(*maps[f], cats[s:e, f]) for f in range(NUM_CATEGORICAL)])
    return len(label)


def main(argv: Optional[list[str]] = None) -> None:
    a = parse_args(argv)
    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_days = parse_days(a.train_days)
    with open(out / "quarantine.jsonl", "w") as quarantine:
        days = {d: parse_day(Path(a.raw_dir) / f"day_{d}", quarantine) for d in (*train_days, a.eval_day)}
    train_cats = np.concatenate([days[d]["cats"] for d in train_days])
    maps = [dictionary(train_cats[:, f], a.threshold) for f in range(NUM_CATEGORICAL)]
    cards = [len(u) + 1 for u, _ in maps]
    spec = FeatureSpec.criteo_like(cards, mappings=("train", "test", "validation"), base_directory=str(out))
    n_train = len(train_cats)
    del train_cats
    ev = days[a.eval_day]
    first_half = ev["line"] <= first_half_lines(ev["lines_in_file"])
    eval_arrays = stacked([ev])
    splits = {"train": stacked([days[d] for d in train_days], np.random.default_rng(a.seed).permutation(n_train)),
              "test": tuple(x[first_half] for x in eval_arrays),
              "validation": tuple(x[~first_half] for x in eval_arrays)}
    rows = {}
    for name, arrays in splits.items():
        with SplitBinaryWriter(str(out), spec, name) as writer:
            rows[name] = write_split(writer, arrays, maps, a.chunk_rows)
    spec.metadata["num_rows"] = rows
    spec.save(str(out))
    print(json.dumps({"rows": rows, "cardinalities": cards,
                      "malformed": sum(d["malformed"] for d in days.values())}))


if __name__ == "__main__":
    main()
