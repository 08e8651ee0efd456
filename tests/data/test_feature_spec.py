"""Feature spec: construction, yaml round trip, validation reporting every problem at once."""
import numpy as np
import pytest
import yaml

from dlrm.data.format.errors import SpecError
from dlrm.data.format.feature_spec import FeatureSpec, categorical_dtype
from dlrm.data.synthetic.criteo import preset_cardinalities
from tests.support.datasets import make_dataset


def test_smallest_id_dtype_holding_the_cardinality():
    assert [categorical_dtype(c).name for c in (1, 128, 129, 32768, 32769, 2**31)] == \
        ["int8", "int8", "int16", "int16", "int32", "int32"]
    with pytest.raises(ValueError):
        categorical_dtype(2**31 + 1)


def test_criteo_like_spec_shape():
    cards = preset_cardinalities("t15")
    spec = FeatureSpec.criteo_like(cards)
    assert spec.label_name == "label"
    assert spec.numerical_names == [f"num_{i}" for i in range(13)]
    assert spec.categorical_names == [f"cat_{i}" for i in range(26)]
    assert spec.cardinalities == cards and spec.mappings == ["train", "test"]
    assert spec.dtype("cat_0") == np.int32 and spec.dtype("cat_5") == np.int8 and spec.dtype("cat_13") == np.int16
    chunks = spec.source_spec["test"]
    assert chunks[0] == {"type": "split_binary", "features": ["label"], "files": ["test/label.bin"]}
    assert chunks[1]["files"] == ["test/numerical.bin"] and chunks[1]["features"] == spec.numerical_names
    assert chunks[2 + 25] == {"type": "split_binary", "features": ["cat_25"], "files": ["test/cat_25.bin"]}
    spec.validate(check_files=False)


def test_yaml_round_trip(tmp_path):
    spec = FeatureSpec.criteo_like([5, 300, 70000], num_numerical=2, metadata={"bayes_auc": 0.8, "seed": 3})
    path = spec.save(str(tmp_path))
    assert path == str(tmp_path / "feature_spec.yaml")
    raw = yaml.safe_load(open(path))
    assert set(raw) == {"feature_spec", "source_spec", "channel_spec", "metadata"}
    loaded = FeatureSpec.load(str(tmp_path))
    assert loaded.to_dict() == spec.to_dict()
    assert loaded.base_directory == str(tmp_path)
    assert FeatureSpec.load(path).to_dict() == spec.to_dict()  # the yaml file itself works too
    assert not list(tmp_path.glob("*.tmp*"))  # atomic save leaves no temp file


def test_validate_and_num_rows_on_files(tmp_path):
    spec, _ = make_dataset(tmp_path, [50, 20], mappings=("train", "test"))
    spec.validate()
    assert (spec.num_rows("train"), spec.num_rows("test")) == (50, 20)


def test_validation_lists_every_problem():
    spec = FeatureSpec.criteo_like([5, 300], num_numerical=2, mappings=["train"])
    del spec.feature_spec["cat_1"]
    spec.feature_spec["cat_0"]["dtype"] = "int64"
    spec.feature_spec["num_1"]["dtype"] = "int8"
    spec.feature_spec["orphan"] = {"dtype": "float16"}
    spec.channel_spec["weights"] = ["orphan"]
    spec.source_spec["train"].pop(0)  # label file
    with pytest.raises(SpecError) as caught:
        spec.validate(check_files=False)
    problems = "\n".join(caught.value.problems)
    for expected in ["names feature 'cat_1', which is missing from feature_spec", "'cat_0' has dtype int64",
                     "'num_1' has dtype int8", "unknown channel 'weights'",
                     "'orphan' is in feature_spec but in no channel", "no file for feature 'label'"]:
        assert expected in problems, expected
    assert len(caught.value.problems) >= 6


def test_cardinality_too_big_for_dtype_and_bad_chunks():
    spec = FeatureSpec.criteo_like([5, 300], num_numerical=2, mappings=["train"])
    spec.feature_spec["cat_1"]["dtype"] = "int8"
    spec.source_spec["train"][1]["features"] = ["num_1", "num_0"]
    spec.source_spec["train"][2]["files"].append("extra.bin")
    with pytest.raises(SpecError) as caught:
        spec.validate(check_files=False)
    problems = "\n".join(caught.value.problems)
    assert "dtype int8 cannot hold ids up to 299" in problems
    assert "in channel order" in problems and "exactly one file" in problems


def test_load_errors_name_the_file(tmp_path):
    with pytest.raises(SpecError, match="does not exist"):
        FeatureSpec.load(str(tmp_path / "nope.yaml"))
    (tmp_path / "bad.yaml").write_text("feature_spec: [unclosed")
    with pytest.raises(SpecError, match="bad.yaml"):
        FeatureSpec.load(str(tmp_path / "bad.yaml"))
    (tmp_path / "partial.yaml").write_text("feature_spec: {}\n")
    with pytest.raises(SpecError, match="missing section 'source_spec'") as caught:
        FeatureSpec.load(str(tmp_path / "partial.yaml"))
    # like every DataError: where (.file) and what (.message, the text without the place)
    assert caught.value.file == str(tmp_path / "partial.yaml")
    assert "missing section 'source_spec'" in caught.value.message and str(caught.value) == caught.value.message
    with pytest.raises(SpecError, match="no mapping 'valid'"):
        FeatureSpec.criteo_like([3]).validate(check_files=False, mappings=["valid"])


def test_yaml_merge_keys_still_load_and_may_be_overridden():
    from dlrm import strict_yaml

    assert strict_yaml.load("base: &b {dtype: int8, cardinality: 3}\ncat_0:\n  <<: *b\n  cardinality: 5\n") == {
        "base": {"dtype": "int8", "cardinality": 3}, "cat_0": {"dtype": "int8", "cardinality": 5}}


@pytest.mark.parametrize("where", ["a feature", "a feature's field", "a section"])
def test_a_key_given_twice_is_refused_naming_both_lines(tmp_path, where):
    """PyYAML keeps the last of two equal keys; a spec edited by hand must not lose a feature silently."""
    text = yaml.safe_dump(FeatureSpec.criteo_like([3, 4]).to_dict(), sort_keys=True)
    lines = text.splitlines()
    if where == "a feature":
        first = next(i for i, line in enumerate(lines) if line.startswith("  cat_1:"))
        duplicate = [lines[first], lines[first + 1], lines[first + 2]]
    elif where == "a feature's field":
        first = next(i for i, line in enumerate(lines) if line.startswith("    cardinality: 4"))
        duplicate = ["    cardinality: 40"]
    else:
        first = next(i for i, line in enumerate(lines) if line.startswith("metadata:"))
        duplicate = [lines[first]]
    at = first + len(duplicate) if where != "a feature's field" else first + 1
    (tmp_path / "feature_spec.yaml").write_text("\n".join(lines[:at] + duplicate + lines[at:]) + "\n")
    assert yaml.safe_load((tmp_path / "feature_spec.yaml").read_text())  # PyYAML alone accepts it
    with pytest.raises(SpecError, match=rf"(?s)feature_spec\.yaml.*given twice in one mapping \(lines {first + 1} and "
                                        rf"{at + 1}\)"):
        FeatureSpec.load(str(tmp_path))


def mixed_spec(**kwargs) -> FeatureSpec:
    """One-hot, multi-hot, numerical and a group id: the shape of NVIDIA's multi-hot feature specs."""
    return FeatureSpec.criteo_like([5, 300], num_numerical=2, mappings=["train"],
                                   multi_hot={"topics": (40, 3), "history": (70000, 5)}, group="display_id", **kwargs)


def test_multi_hot_spec_uses_nvidia_channel_names_and_contract_order(tmp_path):
    spec = mixed_spec()
    assert spec.channel_spec == {"label": ["label"], "numerical": ["num_0", "num_1"],
                                 "onehot_categorical": ["cat_0", "cat_1"],
                                 "multihot_categorical": ["topics", "history"], "map": ["display_id"]}
    assert spec.onehot_names == ["cat_0", "cat_1"] and spec.multihot_names == ["topics", "history"]
    assert spec.categorical_names == ["cat_0", "cat_1", "topics", "history"]
    assert spec.cardinalities == [5, 300, 40, 70000] and spec.hotnesses == [1, 1, 3, 5]
    assert spec.max_hotness == {"topics": 3, "history": 5} and spec.group_name == "display_id"
    assert spec.feature_spec["history"] == {"dtype": "int32", "cardinality": 70000, "max_hotness": 5}
    assert spec.feature_spec["display_id"] == {"dtype": "int64"}
    assert [c["files"] for c in spec.source_spec["train"][-3:]] == \
        [["train/cat_2.bin"], ["train/cat_3.bin"], ["train/group.bin"]]
    spec.save(str(tmp_path))
    assert FeatureSpec.load(str(tmp_path)).validate(check_files=False).to_dict() == spec.to_dict()
    chunks = spec.binary_chunks("train")
    assert [(c.features[0], c.hotness, c.multi_hot, c.record_bytes) for c in chunks[-3:]] == \
        [("topics", 3, True, 3), ("history", 5, True, 20), ("display_id", 1, False, 8)]


def test_legacy_categorical_channel_is_the_one_hot_channel():
    spec = FeatureSpec.criteo_like([5, 300], num_numerical=1)
    assert "categorical" in spec.channel_spec and spec.onehot_names == ["cat_0", "cat_1"]
    spec.channel_spec["onehot_categorical"] = spec.channel_spec.pop("categorical")
    assert spec.validate(check_files=False).categorical_names == ["cat_0", "cat_1"]
    assert spec.multihot_names == [] and spec.group_name is None and spec.hotnesses == [1, 1]


@pytest.mark.parametrize("change, rule", [
    (lambda s: s.channel_spec.update(categorical=[]), "both 'categorical' and 'onehot_categorical'"),
    (lambda s: s.feature_spec["topics"].pop("max_hotness"), "'topics' needs an integer max_hotness >= 1, got None"),
    (lambda s: s.feature_spec["topics"].update(max_hotness=0), "'topics' needs an integer max_hotness >= 1, got 0"),
    (lambda s: s.feature_spec["topics"].update(max_hotness=2.5), "integer max_hotness >= 1, got 2.5"),
    (lambda s: s.feature_spec["topics"].update(dtype="int64"), "multi-hot feature 'topics' has dtype int64"),
    (lambda s: s.feature_spec["topics"].update(cardinality=0), "'topics' needs an integer cardinality >= 1"),
    (lambda s: s.feature_spec["cat_1"].update(max_hotness=4), "'cat_1' has max_hotness 4: a one-hot feature"),
    (lambda s: s.feature_spec["cat_0"].update(embedding_dim=0), "'cat_0': embedding_dim must be an integer >= 1"),
    (lambda s: s.feature_spec["topics"].update(combiner="max"), "'topics': combiner must be one of ['sum', 'mean']"),
    (lambda s: s.feature_spec["display_id"].update(dtype="float32"), "'display_id' has dtype float32; use int32"),
    (lambda s: s.channel_spec["map"].append("num_1"), "channel_spec.map lists at most one feature"),
    (lambda s: s.source_spec["train"][-3].update(features=["topics", "history"]), "stored one per file"),
])
def test_bad_multi_hot_spec_names_the_feature_and_the_rule(change, rule):
    spec = mixed_spec()
    change(spec)
    with pytest.raises(SpecError) as caught:
        spec.validate(check_files=False)
    assert rule in "\n".join(caught.value.problems)


def test_per_feature_embedding_dim_and_combiner_are_accepted():
    spec = mixed_spec()
    spec.feature_spec["topics"].update(embedding_dim=16, combiner="mean")
    spec.feature_spec["cat_0"].update(embedding_dim=4, combiner="sum", max_hotness=1)
    spec.validate(check_files=False)
