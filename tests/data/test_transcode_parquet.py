"""Parquet in NVIDIA's Wide & Deep BYO layout -> split binary: the same values, NVIDIA's spec variants, and
one message (file, feature, row) per broken rule."""
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from dlrm.data.format.errors import DataError, SpecError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.synthetic.widedeep_generator import generate_widedeep
from dlrm.data.transcode.convert import transcode
from tests.support import ROOT
from tests.support.datasets import files_of

ONEHOT = {"ad_id": 50, "document_id": 40000}
MULTIHOT = {"topics": (300, 3)}
NUMERICAL = ["sim", "ctr"]
FEATURES = ["clicked", *NUMERICAL, *ONEHOT, *MULTIHOT, "display_id"]


def table(n, seed):
    """n rows of every feature: label int8, float32 numericals, int64 ids, list<int64> bags, int64 group."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 4, n)
    bags = [list(map(int, rng.integers(0, 300, k))) for k in sizes]
    return pa.table({"clicked": pa.array(rng.integers(0, 2, n), pa.int8()),
                     "sim": pa.array(rng.random(n), pa.float32()), "ctr": pa.array(rng.random(n), pa.float32()),
                     "ad_id": pa.array(rng.integers(0, 50, n), pa.int64()),
                     "document_id": pa.array(rng.integers(0, 40000, n), pa.int32()),
                     "topics": pa.array(bags, pa.list_(pa.int64())),
                     "display_id": pa.array(np.sort(rng.integers(0, 1 << 40, n)), pa.int64())})


def nvidia_spec(train_files, test_files, train_features=FEATURES, test_features=FEATURES):
    """A spec the way NVIDIA's W&D writes one: all five channels, dtypes optional, one parquet chunk each."""
    feature_spec = {"clicked": {"dtype": "bool"}, **{n: {"dtype": "float32"} for n in NUMERICAL},
                    **{n: {"cardinality": c, "dtype": "int64"} for n, c in ONEHOT.items()},
                    **{n: {"cardinality": c, "max_hotness": h, "dtype": "int64"} for n, (c, h) in MULTIHOT.items()},
                    "display_id": {"dtype": "int64"}}
    channel_spec = {"label": ["clicked"], "numerical": list(NUMERICAL), "onehot_categorical": list(ONEHOT),
                    "multihot_categorical": list(MULTIHOT), "map": ["display_id"]}
    source_spec = {"train": [{"type": "parquet", "features": list(train_features), "files": train_files}],
                   "test": [{"type": "parquet", "features": list(test_features), "files": test_files}]}
    return {"feature_spec": feature_spec, "channel_spec": channel_spec, "source_spec": source_spec}


def save(root, spec: dict) -> str:
    path = root / "parquet_spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def write_parts(root, parts, row_group_size=16):
    for name, t in parts.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(t, str(root / name), row_group_size=row_group_size)


def padded(bags, hotness):
    out = np.full((len(bags), hotness), -1, np.int64)
    for r, bag in enumerate(bags):
        out[r, :len(bag)] = bag
    return out


def test_values_survive_batches_row_groups_and_files(tmp_path):
    parts = {"train/a.parquet": table(70, 1), "train/b.parquet": table(45, 2), "test/c.parquet": table(33, 3)}
    write_parts(tmp_path, parts)
    out = transcode(save(tmp_path, nvidia_spec(["train/a.parquet", "train/b.parquet"], ["test/c.parquet"])),
                    str(tmp_path / "bin"), chunk_rows=20)
    assert out.metadata["num_rows"] == {"train": 115, "test": 33}
    spec = FeatureSpec.load(str(tmp_path / "bin")).validate()
    assert spec.feature_spec["document_id"]["dtype"] == "int32" and spec.feature_spec["ad_id"]["dtype"] == "int8"
    whole = pa.concat_tables([parts["train/a.parquet"], parts["train/b.parquet"]])
    batch = BatchReader(spec, "train", 115, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.label, whole["clicked"].to_numpy())
    expected_numerical = np.stack([whole[n].to_numpy() for n in NUMERICAL], axis=1).astype(np.float16)
    np.testing.assert_array_equal(batch.numerical, expected_numerical.astype(np.float32))
    ids = np.concatenate([np.stack([whole[n].to_numpy() for n in ONEHOT], axis=1),
                          padded(whole["topics"].to_pylist(), 3)], axis=1)
    np.testing.assert_array_equal(batch.categorical, ids)
    np.testing.assert_array_equal(batch.group, whole["display_id"].to_numpy())


def test_the_widedeep_log_round_trips_through_parquet_byte_for_byte(tmp_path):
    """Generated split binary -> NVIDIA-style parquet (list columns for the bags) -> transcode: the same files."""
    generated = tmp_path / "generated"
    source = FeatureSpec.load(str(generate_widedeep(str(generated), "widedeep_tiny", 3000, seed=4).save(
        str(generated)))).validate()
    bounds = np.cumsum([0] + source.hotnesses)
    files = {}
    for mapping in ("train", "test"):
        batch = BatchReader(source, mapping, source.num_rows(mapping), prefetch=0).read_batch(0)
        columns = {source.label_name: pa.array(batch.label.astype(bool)),
                   **{n: pa.array(batch.numerical[:, j]) for j, n in enumerate(source.numerical_names)},
                   source.group_name: pa.array(batch.group)}
        for name, hot, a, b in zip(source.categorical_names, source.hotnesses, bounds[:-1], bounds[1:]):
            ids = batch.categorical[:, a:b]
            columns[name] = pa.array(ids[:, 0]) if name in source.onehot_names else \
                pa.array([list(row[row >= 0]) for row in ids], pa.list_(pa.int32()))
        files[mapping] = [f"{mapping}.parquet"]
        pq.write_table(pa.table(columns), str(tmp_path / f"{mapping}.parquet"), row_group_size=700)
    spec = source.to_dict()
    spec["source_spec"] = {m: [{"type": "parquet", "features": list(source.feature_spec), "files": f}]
                           for m, f in files.items()}
    transcode(save(tmp_path, spec), str(tmp_path / "bin"), chunk_rows=512)
    original, again = files_of(generated), files_of(tmp_path / "bin")
    binaries = sorted(name for name in original if name.endswith(".bin"))
    assert len(binaries) == 2 * (1 + 1 + 16 + 1) and binaries == sorted(n for n in again if n.endswith(".bin"))
    for name in binaries:
        assert original[name] == again[name], name
    assert FeatureSpec.load(str(tmp_path / "bin")).feature_spec == source.feature_spec


@pytest.mark.parametrize("variant", ["no_dtypes", "map_in_test_only", "no_map_no_multihot", "legacy_channel",
                                     "float64_and_int32"])
def test_nvidia_spec_variants(tmp_path, variant):
    parts = {"train.parquet": table(40, 5), "test.parquet": table(30, 6)}
    train_features, test_features = FEATURES, FEATURES
    if variant == "map_in_test_only":
        parts["train.parquet"] = parts["train.parquet"].drop(["display_id"])
        train_features = [f for f in FEATURES if f != "display_id"]
    if variant == "float64_and_int32":
        parts = {k: t.set_column(1, "sim", t["sim"].cast(pa.float64())).set_column(
            3, "ad_id", t["ad_id"].cast(pa.int32())) for k, t in parts.items()}
    write_parts(tmp_path, parts)
    spec = nvidia_spec(["train.parquet"], ["test.parquet"], train_features, test_features)
    if variant == "no_dtypes":
        spec["feature_spec"] = {name: {k: v for k, v in info.items() if k != "dtype"}
                                for name, info in spec["feature_spec"].items()}
    if variant == "no_map_no_multihot":  # NVIDIA lists every channel, some empty
        spec["channel_spec"].update(map=[], multihot_categorical=[])
        del spec["feature_spec"]["display_id"], spec["feature_spec"]["topics"]
        for chunks in spec["source_spec"].values():
            chunks[0]["features"] = [f for f in chunks[0]["features"] if f not in ("display_id", "topics")]
    if variant == "legacy_channel":
        spec["channel_spec"]["categorical"] = spec["channel_spec"].pop("onehot_categorical")
    if variant == "float64_and_int32":
        spec["feature_spec"]["sim"]["dtype"] = "float64"
        spec["feature_spec"]["ad_id"]["dtype"] = "int32"
    transcode(save(tmp_path, spec), str(tmp_path / "bin"), chunk_rows=16)
    out = FeatureSpec.load(str(tmp_path / "bin")).validate()
    for mapping, rows in (("train", 40), ("test", 30)):
        batch = BatchReader(out, mapping, rows, prefetch=0).read_batch(0)
        source = parts[f"{mapping}.parquet"]
        np.testing.assert_array_equal(batch.categorical[:, 1], source["document_id"].to_numpy())
        has_group = variant != "no_map_no_multihot" and (mapping == "test" or variant != "map_in_test_only")
        assert (batch.group is not None) == has_group
        if has_group:
            np.testing.assert_array_equal(batch.group, source["display_id"].to_numpy())
    assert out.categorical_names[:2] == list(ONEHOT)


def _with(t, name, values, kind=None):
    return t.set_column(t.schema.get_field_index(name), name, pa.array(values, kind))


BAD_VALUES = [  # (change to rows of b.parquet (35 rows), feature, message); the bad value is at row 21
    (lambda t: _with(t, "ad_id", [0] * 21 + [50] + [0] * 13, pa.int64()), "ad_id", "id 50 is outside [0, 50)"),
    (lambda t: _with(t, "ad_id", [0.0] * 35, pa.float64()), "ad_id", "column type double; it must hold integer ids"),
    (lambda t: _with(t, "sim", [0] * 35, pa.int64()), "sim", "column type int64; it must hold floats (numerical)"),
    (lambda t: _with(t, "topics", [[1]] * 21 + [[1, 2, 3, 4]] + [[]] * 13, pa.list_(pa.int64())), "topics",
     "a list of 4 ids is longer than max_hotness 3"),
    (lambda t: _with(t, "topics", [[1]] * 21 + [[1, -1]] + [[]] * 13, pa.list_(pa.int64())), "topics",
     "id -1 is outside [0, cardinality)"),
    (lambda t: _with(t, "topics", [[1]] * 21 + [[1, 300]] + [[]] * 13, pa.list_(pa.int64())), "topics",
     "id 300 at position 1 of the row [1, 300, -1] is outside [0, 300)"),
    (lambda t: _with(t, "topics", [[1]] * 21 + [[1, None]] + [[]] * 13, pa.list_(pa.int64())), "topics",
     "missing id (null) in the list"),
    (lambda t: _with(t, "topics", [1] * 35, pa.int64()), "topics", "it must hold a list of integer ids"),
    (lambda t: _with(t, "ctr", [0.5] * 21 + [None] + [0.5] * 13, pa.float32()), "ctr", "missing value (null)"),
    (lambda t: _with(t, "ctr", [0.5] * 21 + [1e9] + [0.5] * 13, pa.float32()), "ctr", "overflows float16"),
    (lambda t: _with(t, "clicked", [0] * 21 + [2] + [0] * 13, pa.int8()), "clicked", "label 2 is not 0 or 1"),
    (lambda t: t.drop(["document_id"]), "document_id", "missing column"),
]


@pytest.mark.parametrize("change,feature,why", BAD_VALUES, ids=[b[2][:30] for b in BAD_VALUES])
def test_a_bad_value_names_the_file_the_feature_and_the_row(tmp_path, change, feature, why):
    write_parts(tmp_path, {"a.parquet": table(50, 7), "b.parquet": change(table(35, 8)), "t.parquet": table(9, 9)},
                row_group_size=8)
    with pytest.raises(DataError) as caught:
        transcode(save(tmp_path, nvidia_spec(["a.parquet", "b.parquet"], ["t.parquet"])), str(tmp_path / "bin"),
                  chunk_rows=16)
    error = caught.value
    assert (error.file, error.feature) == (str(tmp_path / "b.parquet"), feature) and why in str(error)
    assert error.row == (None if why.startswith(("column type", "missing column", "it must")) or "must hold" in why
                         else 21)
    assert not (tmp_path / "bin" / "train" / "label.bin").exists()  # nothing published


def _spec_change(spec, what):
    if what == "two labels":
        spec["channel_spec"]["label"] = ["clicked", "sim"]
        spec["channel_spec"]["numerical"] = ["ctr"]
    elif what == "two map features":
        spec["channel_spec"]["map"] = ["display_id", "ad_id"]
        spec["channel_spec"]["onehot_categorical"] = ["document_id"]
    elif what == "train only":
        del spec["source_spec"]["test"]
    elif what == "validation mapping":
        spec["source_spec"]["validation"] = spec["source_spec"]["test"]
    elif what == "map not in test":
        spec["source_spec"]["test"][0]["features"].remove("display_id")
    elif what == "hotness not an integer":
        spec["feature_spec"]["topics"]["max_hotness"] = 2.5
    elif what == "no cardinality":
        del spec["feature_spec"]["ad_id"]["cardinality"]
    elif what == "float ids dtype":
        spec["feature_spec"]["ad_id"]["dtype"] = "float32"
    elif what == "two chunks":
        spec["source_spec"]["train"].append(dict(spec["source_spec"]["train"][0]))
    elif what == "a csv chunk":
        spec["source_spec"]["train"][0]["type"] = "csv"
    elif what == "missing file":
        spec["source_spec"]["test"][0]["files"] = ["nowhere.parquet"]
    return spec


SPEC_RULES = [
    ("two labels", "channel_spec.label must list exactly one feature"),
    ("two map features", "channel_spec.map lists at most one feature"),
    ("train only", "source_spec has mappings ['train']: a parquet dataset has exactly ['train', 'test']"),
    ("validation mapping", "a parquet dataset has exactly ['train', 'test']"),
    ("map not in test", "source_spec.test[0] has no column for feature 'display_id' (channel map)"),
    ("hotness not an integer", "multi-hot feature 'topics' needs an integer max_hotness >= 1, got 2.5"),
    ("no cardinality", "categorical feature 'ad_id' needs an integer cardinality >= 1, got None"),
    ("float ids dtype", "onehot_categorical feature 'ad_id' has dtype 'float32'; a parquet dataset uses one of"),
    ("two chunks", "source_spec.train must be a list of exactly one parquet chunk"),
    ("a csv chunk", "source_spec.train[0] has type 'csv'; a parquet dataset has only 'parquet' chunks"),
    ("missing file", "nowhere.parquet (mapping test) does not exist"),
]


@pytest.mark.parametrize("what,why", SPEC_RULES, ids=[r[0] for r in SPEC_RULES])
def test_a_broken_spec_rule_is_named(tmp_path, what, why):
    write_parts(tmp_path, {"a.parquet": table(10, 1), "t.parquet": table(10, 2)})
    path = save(tmp_path, _spec_change(nvidia_spec(["a.parquet"], ["t.parquet"]), what))
    with pytest.raises(SpecError) as caught:
        transcode(path, str(tmp_path / "bin"))
    assert why in str(caught.value) and caught.value.file == path


def test_cli(tmp_path):
    write_parts(tmp_path, {"a.parquet": table(10, 1), "t.parquet": table(6, 2)})
    path = save(tmp_path, nvidia_spec(["a.parquet"], ["t.parquet"]))
    run = [sys.executable, "-m", "dlrm.data.transcode", "--input", path, "--output", str(tmp_path / "bin")]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert "'train': 10" in ok.stdout and FeatureSpec.load(str(tmp_path / "bin")).num_rows("test") == 6
    write_parts(tmp_path, {"a.parquet": _with(table(10, 1), "ad_id", [0] * 9 + [77], pa.int64())})
    bad = subprocess.run([*run, "--overwrite"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert f"file {tmp_path / 'a.parquet'}, feature 'ad_id', row 9: id 77 is outside [0, 50)" in bad.stderr


def test_the_cli_refuses_a_csv_delimiter_for_a_parquet_source(tmp_path):
    """Before: --delimiter was accepted and changed nothing; now exit 2 naming the spec, nothing written."""
    write_parts(tmp_path, {"a.parquet": table(10, 1), "t.parquet": table(6, 2)})
    path = save(tmp_path, nvidia_spec(["a.parquet"], ["t.parquet"]))
    done = subprocess.run([sys.executable, "-m", "dlrm.data.transcode", "--input", path, "--output",
                           str(tmp_path / "bin"), "--delimiter", ";"], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"argument --delimiter: not used by the parquet source of {path} (it applies to CSV files)" in done.stderr
    assert not (tmp_path / "bin").exists()
