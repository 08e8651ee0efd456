"""CSV + feature spec -> split binary: streamed in chunks, identical values, bad fields named."""
import os
import subprocess
import sys

import numpy as np
import pytest
import yaml

from dlrm.data.format.errors import DataError, SpecError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.transcode.convert import transcode
from tests.support import ROOT

CARDS = [3, 200, 40000]
COLUMNS = ["label", "num_0", "num_1", "cat_0", "cat_1", "cat_2"]


def csv_spec(root, files_by_mapping, columns=COLUMNS):
    spec = FeatureSpec.criteo_like(CARDS, num_numerical=2, mappings=list(files_by_mapping))
    spec.source_spec = {m: [{"type": "csv", "features": list(columns), "files": files}]
                        for m, files in files_by_mapping.items()}
    path = root / "csv_spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    return str(path)


def rows(n, seed):
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 2, n)
    numerical = np.round(rng.normal(0, 4, size=(n, 2)), 3)
    categorical = np.stack([rng.integers(0, c, n) for c in CARDS], axis=1)
    return label, numerical, categorical


def write_csv(path, label, numerical, categorical, delimiter=","):
    with open(path, "w") as f:
        for i in range(label.size):
            fields = [str(label[i])] + [repr(float(x)) for x in numerical[i]] + [str(c) for c in categorical[i]]
            f.write(delimiter.join(fields) + "\n")


def test_transcode_round_trip_over_chunks_and_files(tmp_path):
    parts = [rows(40, 1), rows(25, 2), rows(30, 3)]
    for k, part in enumerate(parts):
        write_csv(tmp_path / f"part{k}.csv", *part)
    spec_path = csv_spec(tmp_path, {"train": ["part0.csv", "part1.csv"], "test": ["part2.csv"]})
    out = transcode(spec_path, str(tmp_path / "bin"), chunk_rows=7)
    assert out.metadata["num_rows"] == {"train": 65, "test": 30}
    loaded = FeatureSpec.load(str(tmp_path / "bin")).validate()
    assert loaded.dtype("cat_2") == np.int32 and loaded.dtype("cat_0") == np.int8
    batch = BatchReader(loaded, "train", 65, prefetch=0).read_batch(0)
    label = np.concatenate([parts[0][0], parts[1][0]])
    numerical = np.concatenate([parts[0][1], parts[1][1]])
    categorical = np.concatenate([parts[0][2], parts[1][2]])
    np.testing.assert_array_equal(batch.label, label)
    np.testing.assert_array_equal(batch.numerical, numerical.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(batch.categorical, categorical)


def test_column_order_comes_from_the_spec_and_tabs_work(tmp_path):
    label, numerical, categorical = rows(12, 4)
    with open(tmp_path / "t.tsv", "w") as f:  # columns shuffled: cat_2, label, num_1, cat_0, num_0, cat_1
        for i in range(12):
            f.write("\t".join(map(str, [categorical[i, 2], label[i], numerical[i, 1], categorical[i, 0],
                                        numerical[i, 0], categorical[i, 1]])) + "\n")
    order = ["cat_2", "label", "num_1", "cat_0", "num_0", "cat_1"]
    spec_path = csv_spec(tmp_path, {"train": ["t.tsv"]}, columns=order)
    transcode(spec_path, str(tmp_path / "bin"), delimiter="\t")
    batch = BatchReader(FeatureSpec.load(str(tmp_path / "bin")), "train", 12, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.categorical, categorical)
    np.testing.assert_array_equal(batch.label, label)


@pytest.mark.parametrize("line,feature,why", [
    ("1,0.5,abc,1,2,3", "num_1", "'abc' is not a number"),
    ("1,0.5,1.5,,2,3", "cat_0", "empty or missing field"),
    ("1,0.5,1.5,1,200,3", "cat_1", "id 200 is outside [0, 200)"),
    ("1,0.5,1.5,1,2.5,3", "cat_1", "id 2.5 is not a whole number"),
    ("1,0.5,1.5,-1,2,3", "cat_0", "id -1 is outside [0, 3)"),
    ("2,0.5,1.5,1,2,3", "label", "label 2 is not 0 or 1"),
    ("1,inf,1.5,1,2,3", "num_0", "numerical value inf is NaN or inf"),
    ("1,0.5,1e9,1,2,3", "num_1", "overflows float16"),
    ("1,0.5,1.5,1,1e30,3", "cat_1", "id 1e+30 is not a whole number"),
    ("1,0.5,1.5,1,2,3,4", None, "has 7 fields, expected 6"),
    ("1,0.5,1.5,1,2", "cat_2", "empty or missing field"),
])
def test_bad_field_names_file_line_and_feature(tmp_path, line, feature, why):
    label, numerical, categorical = rows(20, 5)
    write_csv(tmp_path / "d.csv", label, numerical, categorical)
    lines = (tmp_path / "d.csv").read_text().splitlines()
    lines[13] = line  # line 14
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    spec_path = csv_spec(tmp_path, {"train": ["d.csv"]})
    with pytest.raises(DataError) as caught:
        transcode(spec_path, str(tmp_path / "bin"), chunk_rows=8)
    error = caught.value
    assert error.file == str(tmp_path / "d.csv") and error.feature == feature and error.row == 13
    assert "line 14" in str(error) and why in str(error)
    assert not (tmp_path / "bin" / "train" / "label.bin").exists()  # nothing published


def test_cli_reports_errors_and_succeeds(tmp_path):
    write_csv(tmp_path / "d.csv", *rows(10, 6))
    spec_path = csv_spec(tmp_path, {"train": ["d.csv"]})
    run = [sys.executable, "-m", "dlrm.data.transcode", "--input", spec_path, "--output", str(tmp_path / "bin")]
    ok = subprocess.run(run, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert FeatureSpec.load(str(tmp_path / "bin")).num_rows("train") == 10
    (tmp_path / "d.csv").write_text("1,2,x,0,0,0\n")
    bad = subprocess.run([*run, "--overwrite"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 1 and "d.csv" in bad.stderr and "'num_1'" in bad.stderr and "line 1" in bad.stderr
    assert FeatureSpec.load(str(tmp_path / "bin")).num_rows("train") == 10  # the dataset it would replace is intact


def test_writer_error_in_a_later_file_names_that_file_and_its_line(tmp_path):
    """The writer counts rows over the whole mapping; the error is re-stated at the CSV file's own line."""
    write_csv(tmp_path / "a.csv", *rows(40, 7))
    write_csv(tmp_path / "b.csv", *rows(10, 8))
    lines = (tmp_path / "b.csv").read_text().splitlines()
    lines[2] = "1,0.5,1.5,1,2,40000"  # line 3 of b.csv, row 42 of the mapping
    (tmp_path / "b.csv").write_text("\n".join(lines) + "\n")
    spec_path = csv_spec(tmp_path, {"train": ["a.csv", "b.csv"]})
    with pytest.raises(DataError) as caught:
        transcode(spec_path, str(tmp_path / "bin"), chunk_rows=16)
    error = caught.value
    assert (error.file, error.feature, error.row) == (str(tmp_path / "b.csv"), "cat_2", 2)
    assert "(line 3) id 40000 is outside [0, 40000)" in str(error)


def test_transcode_refuses_an_empty_csv(tmp_path):
    """Before: exit status 0 and a dataset with an empty mapping."""
    write_csv(tmp_path / "train.csv", *rows(10, 1))
    (tmp_path / "test.csv").write_text("")
    spec_path = csv_spec(tmp_path, {"train": ["train.csv"], "test": ["test.csv"]})
    out = tmp_path / "bin"
    run = subprocess.run([sys.executable, "-m", "dlrm.data.transcode", "--input", spec_path, "--output", str(out)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"file {tmp_path / 'test.csv'}: the CSV file is empty: no rows for mapping 'test'" in run.stderr
    assert not (out / "feature_spec.yaml").exists() and not (out / "test" / "label.bin").exists()


def test_output_holding_a_dataset_is_replaced_only_with_overwrite_and_never_mixed(tmp_path):
    """Before: an existing dataset was overwritten silently, its other files (ground_truth.npz) left mixed
    with the new ones, and an --output naming a file ended in a FileExistsError traceback."""
    write_csv(tmp_path / "train.csv", *rows(20, 1))
    write_csv(tmp_path / "test.csv", *rows(10, 2))
    spec_path = csv_spec(tmp_path, {"train": ["train.csv"], "test": ["test.csv"]})
    out = tmp_path / "bin"

    def run(output, *flags):
        return subprocess.run([sys.executable, "-m", "dlrm.data.transcode", "--input", spec_path, "--output",
                               str(output), *flags], capture_output=True, text=True, timeout=120, cwd=ROOT)

    assert run(out).returncode == 0
    (out / "ground_truth.npz").write_bytes(b"an earlier dataset's file")
    before = (out / "feature_spec.yaml").read_bytes()
    again = run(out)
    assert (again.returncode, again.stderr) == (1, f"error: --output {out} already holds a dataset: pass --overwrite "
                                                   f"to replace it, or choose another directory\n")
    assert (out / "feature_spec.yaml").read_bytes() == before and (out / "ground_truth.npz").exists()
    assert run(out, "--overwrite").returncode == 0
    assert not (out / "ground_truth.npz").exists() and FeatureSpec.load(str(out)).validate()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("bin")) == ["bin"]  # nothing left aside
    for target, message in [(tmp_path / "train.csv", "exists and is not a directory"),
                            (tmp_path, "is a non-empty directory that holds no dataset (no feature_spec.yaml): "
                                       "choose a new or empty directory")]:
        refused = run(target, "--overwrite")
        assert (refused.returncode, refused.stderr) == (1, f"error: --output {target} {message}\n")


def test_a_csv_spec_without_dtypes_is_transcoded_with_the_dtypes_the_output_stores(tmp_path):
    """NVIDIA's bring-your-own specs leave dtypes out. Before: `feature 'cat_0' needs a dtype` for every feature."""
    write_csv(tmp_path / "train.csv", *rows(30, 1))
    with_dtypes = yaml.safe_load(open(csv_spec(tmp_path, {"train": ["train.csv"]})))
    without = {**with_dtypes, "feature_spec": {name: {k: v for k, v in info.items() if k != "dtype"}
                                               for name, info in with_dtypes["feature_spec"].items()}}
    (tmp_path / "no_dtypes.yaml").write_text(yaml.safe_dump(without))
    transcode(str(tmp_path / "csv_spec.yaml"), str(tmp_path / "a"))
    spec = transcode(str(tmp_path / "no_dtypes.yaml"), str(tmp_path / "b"))
    dtypes = {name: info["dtype"] for name, info in FeatureSpec.load(str(tmp_path / "b")).feature_spec.items()}
    assert dtypes == {"label": "bool", "num_0": "float16", "num_1": "float16",
                      **{f"cat_{i}": FeatureSpec.criteo_like(CARDS).feature_spec[f"cat_{i}"]["dtype"]
                         for i in range(len(CARDS))}}
    assert spec.metadata["num_rows"] == {"train": 30}
    for name in sorted(os.listdir(tmp_path / "a" / "train")):
        assert (tmp_path / "a" / "train" / name).read_bytes() == (tmp_path / "b" / "train" / name).read_bytes()


def test_a_cardinality_beyond_int32_ids_without_a_dtype_is_named_not_a_traceback(tmp_path):
    write_csv(tmp_path / "train.csv", *rows(5, 1))
    spec = yaml.safe_load(open(csv_spec(tmp_path, {"train": ["train.csv"]})))
    spec["feature_spec"]["cat_2"] = {"cardinality": 2**31 + 5}
    (tmp_path / "huge.yaml").write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError, match="cat_2"):
        transcode(str(tmp_path / "huge.yaml"), str(tmp_path / "out"))
