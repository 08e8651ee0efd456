"""The model takes its widths from the feature contract: any number of numerical features (none: no
bottom MLP), any number of tables, per-table dims for DCNv2; what it cannot take is refused by rule."""
import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.features import FeatureContract, TableConfig, one_hot_tables
from dlrm.model.interaction import (
    dot_interaction_output_dim,
    embedding_dot_interaction,
    reference_embedding_dot_interaction,
)
from dlrm.model.shape_rules import ModelShapeError, check_model_shape
from tests.support.tiny_model import as_blocks, tiny_batch, tiny_model

DIM = 4


def contract(num_numerical, tables):
    return FeatureContract("label", tuple(f"num_{i}" for i in range(num_numerical)), tuple(tables))


def config(arch, seed=0):
    return ModelConfig(arch=arch, embedding_dim=DIM, bottom_mlp=(8, DIM), top_mlp=(8, 1), num_cross_layers=1,
                       cross_projection_dim=3, seed=seed)


@pytest.mark.parametrize("batch", [0, 5])
@pytest.mark.parametrize("tables_per_block", [(4,), (1, 1, 1, 1), (2, 1, 1)])
def test_embedding_dot_interaction_matches_numpy_and_its_autodiff(batch, tables_per_block):
    rng = np.random.default_rng(batch)
    embedded = tf.constant(rng.normal(size=(batch, 4, 3)), tf.float32)

    def from_blocks(embedded):
        return embedding_dot_interaction(as_blocks(embedded, tables_per_block), 3)

    out = from_blocks(embedded)
    assert out.shape == (batch, dot_interaction_output_dim(4, 3, with_bottom=False)) == (batch, 6)
    vectors = embedded.numpy()
    pairs = [np.sum(vectors[:, i] * vectors[:, j], axis=1) for i in range(4) for j in range(i)]  # (1,0), (2,0), ...
    np.testing.assert_allclose(out.numpy(), np.stack(pairs, axis=1), rtol=1e-5, atol=1e-5)
    weights = tf.constant(rng.normal(size=(batch, 6)), tf.float32)
    grads = []
    for interaction in (from_blocks, reference_embedding_dot_interaction):
        with tf.GradientTape() as tape:
            tape.watch(embedded)
            loss = tf.reduce_sum(interaction(embedded) * weights)
        grads.append(tape.gradient(loss, embedded).numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ["dlrm", "dcnv2"])
@pytest.mark.parametrize("num_numerical, num_tables", [(0, 2), (1, 1), (5, 3), (13, 26), (2, 30)])
def test_input_widths_come_from_the_contract(arch, num_numerical, num_tables):
    shape = contract(num_numerical, one_hot_tables([3 + t for t in range(num_tables)], DIM))
    model = tiny_model(config(arch), shape)
    assert [spec.shape.as_list() for spec in model.input_signature] == [[None, num_numerical], [None, num_tables]]
    assert (model.bottom_mlp is None) == (num_numerical == 0)
    predict = tf.function(model.call, input_signature=model.input_signature)
    for rows in (6, 0):
        numerical, categorical = tiny_batch(rows, contract=shape)
        with tf.GradientTape() as tape:
            logits = predict(numerical, categorical)
        assert logits.shape == (rows,) and np.isfinite(logits.numpy()).all()
        assert all(g is not None for g in tape.gradient(logits, model.trainable_variables))


def test_dcnv2_crosses_tables_of_different_dims():
    tables = (TableConfig("small", 5, 2), TableConfig("wide", 7, 6), TableConfig("mid", 3, 4))
    for num_numerical, cross_in in [(3, DIM + 12), (0, 12)]:
        model = tiny_model(config("dcnv2"), contract(num_numerical, tables))
        assert model.cross.down[0].kernel.shape == (cross_in, 3)
        assert model(*tiny_batch(4, contract=model.contract)).shape == (4,)


def test_dot_interaction_refuses_tables_of_another_dim_naming_them():
    tables = (TableConfig("a", 5, DIM), TableConfig("b", 7, 6), TableConfig("c", 3, 2))
    with pytest.raises(ModelShapeError) as error:
        tiny_model(config("dlrm"), contract(2, tables))
    assert str(error.value) == (
        "the DLRM dot interaction multiplies every embedding with the bottom MLP's output, so every table's dim "
        "must equal the bottom MLP's last layer (4, --bottom_mlp_dims); differing: 'b' (dim 6), 'c' (dim 2). Set "
        "their embedding_dim in the feature spec, change --embedding_dim / --bottom_mlp_dims, or use --arch dcnv2 "
        "(per-table dims allowed)")
    with pytest.raises(ModelShapeError, match=r"equal the first table's \(4\); differing: 'b' \(dim 6\)"):
        tiny_model(config("dlrm"), contract(0, tables))


def test_shapes_no_model_can_take_are_refused_by_rule():
    with pytest.raises(ModelShapeError, match="needs at least two vectors to multiply; this dataset has no numerical "
                                              "features and one categorical feature \\('only'\\): use --arch dcnv2"):
        tiny_model(config("dlrm"), contract(0, [TableConfig("only", 5, DIM)]))
    assert tiny_model(config("dcnv2"), contract(0, [TableConfig("only", 5, DIM)])).bottom_mlp is None
    for arch in ("dlrm", "dcnv2"):
        with pytest.raises(ModelShapeError, match="the model needs at least one categorical feature"):
            check_model_shape(config(arch), contract(3, []))
