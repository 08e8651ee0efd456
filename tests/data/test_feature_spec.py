"""Feature spec: construction, yaml round trip, validation reporting every problem at once."""
import numpy as np
import pytest
import yaml

from dlrm.data.criteo import preset_cardinalities
from dlrm.data.errors import SpecError
from dlrm.data.feature_spec import FeatureSpec, categorical_dtype
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
