"""Crossed features of the Wide & Deep wide part: the cross ids (range, determinism, exact index when the
pairs fit, hashed otherwise, the same in TensorFlow as in Python), their tables in the one embedding
collection, the parameter count, the model reading them, and the dataset-dependent refusals."""
import json

import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.local import LocalEmbedding
from dlrm.feature_crosses import Cross, cross_key
from dlrm.features import FeatureContract, TableConfig
from dlrm.model.build import build_model
from dlrm.model.cross_ids import cross_ids, embedding_ids
from dlrm.model.shape_rules import ModelShapeError
from dlrm.model.size import parameter_count, parameter_count_of
from dlrm.model_tables import model_crosses, model_tables

TABLES = (TableConfig("ad", 50, 8), TableConfig("platform", 3, 2),
          TableConfig("topics", 40, 4, hotness=3, combiner="mean", multi_hot=True), TableConfig("geo", 60, 4))
CONTRACT = FeatureContract("clicked", ("sim",), TABLES)


def config(crosses=(("ad", "platform"),), buckets=1 << 20, **fields) -> ModelConfig:
    return ModelConfig(**{"arch": "widedeep", "deep_hidden_units": (8,), "seed": 3, "wide_crosses": crosses,
                          "wide_cross_buckets": buckets, **fields})


def every_pair(first_rows: int, second_rows: int) -> np.ndarray:
    """[first_rows * second_rows, 2] int32: every pair of ids."""
    a, b = np.meshgrid(np.arange(first_rows), np.arange(second_rows), indexing="ij")
    return np.stack([a.ravel(), b.ravel()], axis=1).astype(np.int32)


def test_exact_cross_ids_number_every_pair_once():
    cross = Cross("ad", "geo", 0, 1, 50, 60, buckets=3000)
    assert cross.exact and cross.rows == 3000
    ids = cross_ids(tf.constant(every_pair(50, 60)), [cross]).numpy()[:, 0]
    np.testing.assert_array_equal(ids, np.arange(3000))  # a * 60 + b: no collisions


def test_hashed_cross_ids_stay_in_range_spread_and_match_the_python_definition():
    cross = Cross("ad", "geo", 0, 1, 50, 60, buckets=64)
    assert not cross.exact and cross.rows == 64
    pairs = every_pair(50, 60)
    ids = cross_ids(tf.constant(pairs), [cross]).numpy()[:, 0]
    assert ids.min() >= 0 and ids.max() < 64
    np.testing.assert_array_equal(ids, [cross_key(int(a), int(b), cross) for a, b in pairs])
    counts = np.bincount(ids, minlength=64)
    assert counts.min() > 0.6 * 3000 / 64 and counts.max() < 1.4 * 3000 / 64, counts  # every bucket, evenly
    # consecutive ids of either feature land in different buckets (the mixing)
    assert np.mean(ids[1:] != ids[:-1]) > 0.95
    again = cross_ids(tf.constant(pairs), [cross]).numpy()[:, 0]
    np.testing.assert_array_equal(ids, again)  # deterministic


def test_large_cardinalities_hash_without_overflow():
    cross = Cross("user", "item", 0, 1, 2**31 - 1, 2**31 - 1, buckets=1 << 20)
    pairs = np.array([[0, 0], [2**31 - 2, 2**31 - 2], [123456789, 987654321], [2**31 - 2, 0]], np.int32)
    ids = cross_ids(tf.constant(pairs), [cross]).numpy()[:, 0]
    np.testing.assert_array_equal(ids, [cross_key(int(a), int(b), cross) for a, b in pairs])
    assert ids.min() >= 0 and ids.max() < 1 << 20


def test_both_orders_of_two_features_are_different_tables_with_different_ids():
    ab, ba = model_crosses(config((("ad", "geo"),), 64), CONTRACT)[0], model_crosses(config((("geo", "ad"),), 64),
                                                                                    CONTRACT)[0]
    assert (ab.name, ba.name) == ("ad_x_geo", "geo_x_ad")
    batch = tf.constant(np.concatenate([every_pair(50, 60)[:, :1], np.zeros((3000, 4), np.int32),
                                        every_pair(50, 60)[:, 1:]], axis=1))  # ad, platform, topics x3, geo
    assert np.mean(cross_ids(batch, [ab]).numpy() != cross_ids(batch, [ba]).numpy()) > 0.9


def test_cross_tables_come_last_in_the_one_collection_and_are_counted():
    cfg = config((("ad", "platform"), ("geo", "ad")), buckets=1000)
    tables = model_tables(cfg, CONTRACT)
    assert [t.name for t in tables] == ["ad", "platform", "topics", "geo", "ad_wide", "platform_wide", "topics_wide",
                                        "geo_wide", "ad_x_platform_wide", "geo_x_ad_wide"]
    crosses = tables[-2:]
    assert [(t.rows, t.dim, t.hotness, t.initializer) for t in crosses] == [(150, 1, 1, "zeros"), (1000, 1, 1, "zeros")]
    assert [t.name for t in model_tables(config(model_type="deep", crosses=()), CONTRACT)] == [t.name for t in TABLES]
    assert [t.name for t in model_tables(config(model_type="wide"), CONTRACT)][-1] == "ad_x_platform_wide"
    m = build_model(cfg, CONTRACT, LocalEmbedding(tables, seed=3))
    m(np.zeros((2, 1), np.float32), np.zeros((2, CONTRACT.total_hotness), np.int32))
    assert parameter_count(m) == parameter_count_of(cfg, CONTRACT)
    assert parameter_count_of(cfg, CONTRACT) - parameter_count_of(config(()), CONTRACT) == 1150


def test_the_wide_logit_adds_the_weight_of_the_rows_pair():
    cfg = config((("ad", "platform"),), model_type="wide")
    m = build_model(cfg, CONTRACT, LocalEmbedding(model_tables(cfg, CONTRACT), seed=3))
    categorical = np.array([[7, 2, 1, -1, -1, 5], [7, 1, 1, -1, -1, 5]], np.int32)
    numerical = np.zeros((2, 1), np.float32)
    np.testing.assert_array_equal(m(numerical, categorical).numpy(), [0.0, 0.0])  # zero start
    table = [var for piece, var in m.embeddings.held_pieces() if piece.table == len(m.embeddings.tables) - 1][0]
    table.assign(tf.tensor_scatter_nd_update(table, [[7 * 3 + 2]], [[1.5]]))
    np.testing.assert_array_equal(m(numerical, categorical).numpy(), [1.5, 0.0])  # only the pair (7, 2)
    ids = embedding_ids(tf.constant(categorical), 1, m.crosses).numpy()
    np.testing.assert_array_equal(ids[:, -1], [23, 22])
    assert table.ref() in {v.ref() for v in m.wide_variables}


@pytest.mark.parametrize("crosses, message", [
    ((("ad", "site"),), "--wide_crosses ad:site: the dataset has no categorical feature 'site'"),
    ((("topics", "ad"),), "--wide_crosses topics:ad: 'topics' is multi-hot (hotness 3); only one-hot features"),
])
def test_crosses_the_dataset_cannot_have_are_refused_naming_the_feature(crosses, message):
    cfg = config(crosses)
    with pytest.raises(ModelShapeError) as caught:
        build_model(cfg, CONTRACT, LocalEmbedding(TABLES, seed=3))
    assert message in str(caught.value)


def test_the_crosses_survive_a_checkpoints_json_config():
    from dlrm.config import Config

    saved = Config(model=config((("ad", "platform"), ("geo", "ad")), buckets=1000))
    again = Config.from_dict(json.loads(json.dumps(saved.to_dict())))
    assert again.model.wide_crosses == (("ad", "platform"), ("geo", "ad")) and again.model.wide_cross_buckets == 1000
