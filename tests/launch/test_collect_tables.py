"""The sweep table's model size comes from the run's own tables: per-table dims and multi-hot hotness."""
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.launch.collect import placement_memory, run_tables


def _config(dataset_dir: str, preset: str = "tiny") -> dict:
    return {"data": {"dataset_dir": dataset_dir, "synthetic_preset": preset},
            "model": {"embedding_dim": 16, "combiner": "sum"},
            "sharding": {"strategy": "memory_balanced", "bytes_per_element": 4}, "optimizer": {"optimizer": "sgd"}}


def test_tables_of_a_dataset_with_per_table_dims_and_bags(tmp_path):
    spec = FeatureSpec.split_binary("label", ["n"], {"a": 100}, multi_hot={"b": (50, 3)})
    spec.feature_spec["a"]["embedding_dim"] = 4
    spec.save(str(tmp_path))
    tables = run_tables(_config(str(tmp_path)), None)
    assert [(t.name, t.rows, t.dim, t.hotness) for t in tables] == [("a", 100, 4, 1), ("b", 50, 16, 3)]
    memory = placement_memory(_config(str(tmp_path)), tables, 1)
    assert memory["max_bytes"] == (100 * 4 + 50 * 16) * 4


def test_tables_of_a_multi_hot_preset_list_one_hot_tables_first():
    tables = run_tables(_config("", "mlperf_tiny"), None)
    assert [t.multi_hot for t in tables] == sorted(t.multi_hot for t in tables)
    assert max(t.hotness for t in tables) == 100 and all(t.dim == 16 for t in tables)


def test_tables_of_a_checkpoint_in_the_old_format_take_its_one_dim():
    meta = {"model_shape": {"table_sizes": [10, 20], "embedding_dim": 8}}
    tables = run_tables(_config(""), meta)
    assert [(t.rows, t.dim, t.hotness) for t in tables] == [(10, 8, 1), (20, 8, 1)]
