"""CSV with multi-hot list columns and a group id -> split binary: values, padding, errors by file/feature/line."""
import numpy as np
import pytest
import yaml

from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.data.transcode.convert import transcode

COLUMNS = ["label", "display_id", "num_0", "topics", "cat_0", "history"]
# line text per row: label, group id, numerical, topics (max 3 ids of 40), one-hot (of 7), history (max 2 of 1000)
LINES = ['1,9007199254740993,0.5,"[3,17,5]",4,"[999]"',
         '0,12,-1.25,"[]",0,"[]"',
         '1,12,2.0,"[39]",6,"[0,1]"',
         '0,-4,0.0,"[ 1 , 2 ]",3,"[7,7]"']


def csv_spec(root, files) -> str:
    spec = FeatureSpec.split_binary("label", ["num_0"], {"cat_0": 7}, mappings=["train"],
                                    multi_hot={"topics": (40, 3), "history": (1000, 2)}, group="display_id")
    spec.feature_spec["topics"].update(embedding_dim=16, combiner="mean")
    spec.source_spec = {"train": [{"type": "csv", "features": COLUMNS, "files": files}]}
    path = root / "csv_spec.yaml"
    path.write_text(yaml.safe_dump(spec.to_dict()))
    return str(path)


def write_lines(path, lines):
    path.write_text("\n".join(lines) + "\n")


def test_list_columns_become_padded_multi_hot_files_and_the_group_id_is_exact(tmp_path):
    write_lines(tmp_path / "a.csv", LINES[:3])
    write_lines(tmp_path / "b.csv", LINES[3:])
    out = transcode(csv_spec(tmp_path, ["a.csv", "b.csv"]), str(tmp_path / "bin"), chunk_rows=2)
    loaded = FeatureSpec.load(str(tmp_path / "bin")).validate()
    assert loaded.channel_spec == out.channel_spec
    assert loaded.categorical_names == ["cat_0", "topics", "history"] and loaded.group_name == "display_id"
    assert loaded.feature_spec["topics"] == {"dtype": "int8", "cardinality": 40, "max_hotness": 3,
                                             "embedding_dim": 16, "combiner": "mean"}
    batch = BatchReader(loaded, "train", 4, prefetch=0).read_batch(0)
    np.testing.assert_array_equal(batch.categorical, [[4, 3, 17, 5, 999, -1],
                                                      [0, -1, -1, -1, -1, -1],
                                                      [6, 39, -1, -1, 0, 1],
                                                      [3, 1, 2, -1, 7, 7]])
    np.testing.assert_array_equal(batch.group, [9007199254740993, 12, 12, -4])
    np.testing.assert_array_equal(batch.label, [1, 0, 1, 0])
    np.testing.assert_array_equal(batch.numerical[:, 0], [0.5, -1.25, 2.0, 0.0])


def test_tab_separated_lists_need_no_quotes(tmp_path):
    write_lines(tmp_path / "a.tsv", ["\t".join(_fields(line.replace('"', ""))) for line in LINES])
    transcode(csv_spec(tmp_path, ["a.tsv"]), str(tmp_path / "bin"), delimiter="\t")
    batch = BatchReader(FeatureSpec.load(str(tmp_path / "bin")), "train", 4, prefetch=0).read_batch(0)
    assert batch.categorical[0].tolist() == [4, 3, 17, 5, 999, -1]


def _fields(row: str) -> list:
    """Split an unquoted line at the commas outside brackets."""
    fields, depth, current = [], 0, ""
    for char in row:
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            fields.append(current)
            current = ""
        else:
            current += char
    return fields + [current]


@pytest.mark.parametrize("line, feature, why", [
    ('1,5,0.5,"[3,17,5,8]",4,"[1]"', "topics", "(line 3) 4 ids is more than max_hotness 3"),
    ('1,5,0.5,"[3,40]",4,"[1]"', "topics", "(line 3) id 40 at position 1 of the row [3, 40, -1] is outside [0, 40)"),
    ('1,5,0.5,"[3,-1]",4,"[1]"', "topics", "(line 3) id -1 is outside [0, cardinality)"),
    ('1,5,0.5,"[3,99999999999999999999]",4,"[1]"', "topics", "(line 3) id 99999999999999999999 is outside"),
    ('1,5,0.5,"3,17",4,"[1]"', "topics", "(line 3) '3,17' is not a bracketed list of integer ids"),
    ('1,5,0.5,"[3,x]",4,"[1]"', "topics", "is not a bracketed list of integer ids like [3,17,5]"),
    ('1,5,0.5,,4,"[1]"', "topics", "(line 3) empty or missing field"),
    ('1,5,0.5,"[1]",4,"[1000]"', "history", "(line 3) id 1000 at position 0 of the row [1000, -1] is outside"),
    ('1,x,0.5,"[1]",4,"[1]"', "display_id", "(line 3) 'x' is not an integer group id"),
    ('1,,0.5,"[1]",4,"[1]"', "display_id", "(line 3) empty or missing field"),
    ('1,5,0.5,"[1]",7,"[1]"', "cat_0", "(line 3) id 7 is outside [0, 7)"),
])
def test_bad_list_or_group_field_names_file_feature_and_line(tmp_path, line, feature, why):
    write_lines(tmp_path / "a.csv", LINES)
    write_lines(tmp_path / "b.csv", LINES[:2] + [line] + LINES[2:])
    with pytest.raises(DataError) as caught:
        transcode(csv_spec(tmp_path, ["a.csv", "b.csv"]), str(tmp_path / "bin"), chunk_rows=2)
    error = caught.value
    assert (error.file, error.feature, error.row) == (str(tmp_path / "b.csv"), feature, 2)
    assert why in str(error)
    assert not (tmp_path / "bin" / "train" / "label.bin").exists()  # nothing published


def test_an_unquoted_list_with_comma_delimiters_is_a_field_count_error(tmp_path):
    write_lines(tmp_path / "a.csv", LINES[:1] + ['1,5,0.5,[3,17],4,"[1]"'])
    with pytest.raises(DataError, match=r"\(line 2\) has 7 fields, expected 6") as caught:
        transcode(csv_spec(tmp_path, ["a.csv"]), str(tmp_path / "bin"))
    assert caught.value.row == 1
