"""The feature contract read from a feature spec: table order, hotness, per-feature dims and combiners, group."""
import yaml

from dlrm.data.format.contract import contract_from_spec
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.features import TableConfig
from tests.data.mixed_dataset import mixed_spec
from tests.support import ROOT


def test_one_hot_spec_gives_one_hot_tables_of_the_default_dim():
    contract = contract_from_spec(FeatureSpec.criteo_like([5, 300], num_numerical=3), embedding_dim=8)
    assert contract.tables == (TableConfig("cat_0", 5, 8), TableConfig("cat_1", 300, 8))
    assert contract.numerical == ("num_0", "num_1", "num_2") and contract.label == "label"
    assert contract.group is None and contract.total_hotness == 2 and contract.problems() == []


def test_multi_hot_tables_follow_the_one_hot_ones_with_their_max_hotness():
    spec = mixed_spec()
    spec.feature_spec["topics"].update(embedding_dim=16, combiner="mean")
    spec.feature_spec["cat_2"]["embedding_dim"] = 4
    contract = contract_from_spec(spec, embedding_dim=8, combiner="sum")
    assert contract.tables == (
        TableConfig("cat_0", 5, 8), TableConfig("cat_1", 300, 8), TableConfig("cat_2", 40000, 4),
        TableConfig("topics", 40, 16, hotness=3, combiner="mean", multi_hot=True),
        TableConfig("history", 70000, 8, hotness=5, combiner="sum", multi_hot=True),
        TableConfig("single", 129, 8, hotness=1, combiner="sum", multi_hot=True))
    assert contract.group == "display_id" and contract.num_numerical == 2
    assert contract.total_hotness == 12 and contract.id_columns(4) == (6, 11) and contract.total_dim == 52
    assert contract.problems() == []


def test_the_default_combiner_applies_where_the_spec_sets_none():
    contract = contract_from_spec(mixed_spec(), embedding_dim=2, combiner="mean")
    assert [t.combiner for t in contract.tables] == ["mean"] * 6


def test_the_example_spec_of_the_data_docs_is_valid_and_gives_the_documented_batch_width():
    text = (ROOT / "docs" / "data.md").read_text()
    section = text[text.index("## Multi-hot features and the group id"):]
    start = section.index("```yaml") + len("```yaml")
    example = yaml.safe_load(section[start:section.index("```", start)])
    spec = FeatureSpec(example["feature_spec"], example["source_spec"], example["channel_spec"]).validate(
        check_files=False)
    contract = contract_from_spec(spec, embedding_dim=16)
    assert contract.table_names == ["country", "device", "topics", "history"] and contract.group == "display_id"
    assert contract.total_hotness == 25 and [t.dim for t in contract.tables] == [16, 8, 16, 16]
    assert contract.tables[2].combiner == "mean" and contract.num_numerical == 2
