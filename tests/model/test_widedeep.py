"""Wide & Deep: the tables it asks for, shapes, the parts each model type keeps, initialisation, the
published parameter count of NVIDIA's configuration, no numerical features, XLA, and dropout masks that
do not depend on how a batch's rows are split."""
import math

import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.data.synthetic import widedeep_reference as ref
from dlrm.embedding.local import LocalEmbedding
from dlrm.features import FeatureContract, TableConfig
from dlrm.model.build import build_model
from dlrm.model.dropout import keep_mask, relu_dropout
from dlrm.model.size import parameter_count, parameter_count_of
from dlrm.model_tables import model_tables
from tests.support.contracts import one_hot_contract

# NVIDIA's TF2 W&D on Outbrain: 1235 embedding values per row, "~92M" parameters (exactly this many).
REFERENCE_PARAMETERS = 91_777_245
TABLES = (TableConfig("ad", 50, 8), TableConfig("platform", 3, 2),
          TableConfig("topics", 40, 4, hotness=3, combiner="mean", multi_hot=True))
CONTRACT = FeatureContract("clicked", ("sim", "ctr"), TABLES)
HIDDEN = (16, 8)


def config(**fields) -> ModelConfig:
    return ModelConfig(**{"arch": "widedeep", "deep_hidden_units": HIDDEN, "seed": 3, **fields})


def model(contract=CONTRACT, xla=False, **fields):
    cfg = config(**fields)
    return build_model(cfg, contract, LocalEmbedding(model_tables(cfg, contract), seed=cfg.seed), xla=xla)


def batch(rows=6, contract=CONTRACT, seed=0):
    rng = np.random.default_rng(seed)
    numerical = rng.normal(size=(rows, contract.num_numerical)).astype(np.float32)
    ids = [rng.integers(0, t.rows, (rows, t.hotness)) for t in contract.tables]
    categorical = np.concatenate(ids, axis=1).astype(np.int32)
    if contract.total_hotness > 2:
        categorical[0, -2:] = -1  # a bag with padding
    return numerical, categorical


def randomise(variables, seed=1):
    rng = np.random.default_rng(seed)
    for var in variables:
        var.assign(rng.normal(0.0, 0.5, var.shape).astype(np.float32))


def test_model_tables_are_the_deep_ones_then_one_dim_1_wide_table_per_feature():
    tables = model_tables(config(), CONTRACT)
    assert [t.name for t in tables] == ["ad", "platform", "topics", "ad_wide", "platform_wide", "topics_wide"]
    assert [t.dim for t in tables] == [8, 2, 4, 1, 1, 1]
    assert [(t.rows, t.hotness, t.multi_hot) for t in tables[3:]] == [(t.rows, t.hotness, t.multi_hot) for t in TABLES]
    assert tables[5].combiner == "sum" and tables[2].combiner == "mean"  # wide bags: summed whatever the feature says
    assert {t.initializer for t in tables[:3]} == {"glorot_normal"} and {t.initializer for t in tables[3:]} == {"zeros"}
    assert [t.name for t in model_tables(config(model_type="deep"), CONTRACT)] == ["ad", "platform", "topics"]
    assert [t.name for t in model_tables(config(model_type="wide"), CONTRACT)] == ["ad_wide", "platform_wide",
                                                                                   "topics_wide"]
    assert model_tables(ModelConfig(arch="dcnv2"), CONTRACT) == TABLES


@pytest.mark.parametrize("model_type", ["wide", "deep", "wide_n_deep"])
def test_logits_have_one_value_per_row_for_every_model_type(model_type):
    m = model(model_type=model_type)
    numerical, categorical = batch()
    logits = m(numerical, categorical)
    assert logits.shape == (6,) and logits.dtype == tf.float32 and np.all(np.isfinite(logits.numpy()))
    assert m(numerical[:0], categorical[:0]).shape == (0,)  # an empty local batch
    assert [s.shape.as_list() for s in m.input_signature] == [[None, 2], [None, CONTRACT.total_hotness]]
    assert m.embeddings.total_dim == {"wide": 3, "deep": 14, "wide_n_deep": 17}[model_type]


def test_wide_n_deep_is_the_sum_of_the_wide_and_the_deep_model():
    numerical, categorical = batch()
    both, wide, deep = model(), model(model_type="wide"), model(model_type="deep")
    assert wide.deep is None and deep.wide_variables == []
    assert len(both.wide_variables) == len(wide.wide_variables) == 3 + 2  # three tables, kernel, bias
    for seed, (a, b) in enumerate(zip(both.wide_variables, wide.wide_variables)):
        randomise([a], seed)
        randomise([b], seed)
    np.testing.assert_allclose(both(numerical, categorical).numpy(),
                               wide(numerical, categorical).numpy() + deep(numerical, categorical).numpy(),
                               rtol=1e-5, atol=1e-6)
    # the wide logit by hand: summed table weights of the row's ids, numerical kernel, bias
    tables, kernel, bias = [v.numpy() for v in wide.wide_variables[:3]], *[v.numpy() for v in wide.wide_variables[3:]]
    columns = np.split(categorical, np.cumsum([t.hotness for t in TABLES])[:-1], axis=1)
    expected = [sum(float(table[i, 0]) for table, ids in zip(tables, columns) for i in ids[r] if i >= 0)
                + float(numerical[r] @ kernel[:, 0]) + float(bias[0]) for r in range(len(numerical))]
    np.testing.assert_allclose(wide(numerical, categorical).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_wide_part_starts_at_zero_and_deep_tables_glorot_normal():
    contract = FeatureContract("y", ("x",), (TableConfig("big", 20000, 16), TableConfig("small", 7, 3)))
    m = model(contract)
    assert all(not np.any(v.numpy()) for v in m.wide_variables) and len(m.wide_variables) == 4
    big = m.embeddings.table_variables[0].numpy()
    std = math.sqrt(2.0 / (20000 + 16))
    assert abs(big.std() / std - 1.0) < 0.02 and abs(big.mean()) < 0.02 * std
    assert np.max(np.abs(big)) <= 2.0 * std / 0.87962566103423978 + 1e-9  # truncated at 2 sigma of the draw
    deep_kernel = m.deep.dense_layers[0].kernel.numpy()
    assert deep_kernel.std() > 0 and not np.any(m.deep.dense_layers[0].bias.numpy())  # Keras Dense: zero biases
    deep_only = model(contract, model_type="deep")  # same seed: the same deep part, and the wide part adds 0
    np.testing.assert_array_equal(m(*batch(4, contract)).numpy(), deep_only(*batch(4, contract)).numpy())


def test_reference_configuration_has_the_published_width_and_parameter_count():
    contract = FeatureContract(ref.LABEL, ref.NUMERICAL_FEATURES, ref.reference_tables())
    cfg = ModelConfig(arch="widedeep")
    assert contract.total_dim == ref.EMBEDDING_WIDTH == 1235 and cfg.deep_hidden_units == ref.DEEP_HIDDEN_UNITS
    assert parameter_count_of(cfg, contract) == REFERENCE_PARAMETERS
    # deep tables + one weight per id + deep MLP (1248 -> 5 x 1024 -> 1) + wide numerical kernel and bias
    deep_tables = sum(f.cardinality * f.dim for f in ref.FEATURES)
    wide_tables = sum(f.cardinality for f in ref.FEATURES)
    mlp = 1248 * 1024 + 1024 + 4 * (1024 * 1024 + 1024) + 1024 + 1
    assert deep_tables + wide_tables + mlp + 13 + 1 == REFERENCE_PARAMETERS


@pytest.mark.parametrize("cfg", [config(), config(model_type="wide"), config(model_type="deep"),
                                 ModelConfig(arch="dcnv2", bottom_mlp=(8, 4), top_mlp=(8, 1),
                                             cross_projection_dim=3, num_cross_layers=2),
                                 ModelConfig(arch="dlrm", bottom_mlp=(8, 4), top_mlp=(8, 1))],
                         ids=["widedeep", "wide", "deep", "dcnv2", "dlrm"])
def test_parameter_count_from_the_configuration_equals_the_built_models(cfg):
    contract = one_hot_contract([30, 20, 10], 4, num_numerical=3)
    m = build_model(cfg, contract, LocalEmbedding(model_tables(cfg, contract), seed=0))
    by_variables = sum(int(np.prod(v.shape)) for v in m.trainable_variables)
    assert parameter_count(m) == parameter_count_of(cfg, contract) == by_variables


def test_no_numerical_features():
    contract = FeatureContract("y", (), TABLES)
    m = model(contract)
    assert m.wide_kernel is None and m.deep.dense_layers[0].kernel.shape[0] == 14
    assert m(*batch(5, contract)).shape == (5,)


def test_xla_dense_part_computes_the_same_logits():
    numerical, categorical = batch()
    plain, compiled = model(), model(xla=True)
    for a, b in zip(plain.wide_variables, compiled.wide_variables):
        randomise([a])
        randomise([b])
    for key in (None, (5, 100)):
        extra = {} if key is None else {"training": True, "step": key[0], "first_row": key[1]}
        np.testing.assert_allclose(compiled(numerical, categorical, **extra).numpy(),
                                   plain(numerical, categorical, **extra).numpy(), rtol=1e-5, atol=1e-6)


def test_dropout_masks_depend_on_the_dataset_row_not_on_the_split():
    m = model(deep_dropout=0.5)
    numerical, categorical = batch(9)
    step = tf.constant(7, tf.int64)
    whole = m(numerical, categorical, training=True, first_row=tf.constant(100, tf.int64), step=step).numpy()
    split = np.concatenate([m(numerical[a:b], categorical[a:b], training=True, step=step,
                              first_row=tf.constant(100 + a, tf.int64)).numpy() for a, b in [(0, 2), (2, 2), (2, 9)]])
    np.testing.assert_allclose(split, whole, rtol=1e-6, atol=1e-7)
    inference = m(numerical, categorical).numpy()
    assert not np.allclose(whole, inference)  # dropout is on in training only
    other_step = m(numerical, categorical, training=True, first_row=tf.constant(100, tf.int64),
                   step=tf.constant(8, tf.int64)).numpy()
    assert not np.allclose(whole, other_step)


def test_keep_mask_keeps_one_minus_rate_of_the_units_independently():
    mask = keep_mask(4000, 256, 0.1, 0, tf.constant(3, tf.int64), tf.constant(2**33, tf.int64), layer=2).numpy()
    assert abs(mask.mean() - 0.9) < 0.003
    assert abs(mask[:, :128].mean() - mask[:, 128:].mean()) < 0.005  # no pattern along units
    other_layer = keep_mask(4000, 256, 0.1, 0, tf.constant(3, tf.int64), tf.constant(2**33, tf.int64), layer=3)
    agreement = np.mean(mask == other_layer.numpy())
    assert abs(agreement - (0.9 ** 2 + 0.1 ** 2)) < 0.005  # layers draw independent masks


@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_compiled_relu_dropout_gives_the_bits_of_plain_relu_then_mask(dtype):
    """ReLU and dropout run as one XLA-compiled function, forward and backward: the same bits as a plain ReLU
    times `keep_mask`'s scaled mask in plain ops and autodiff's gradient of that, with a first row past 2^32
    (the mask's 64-bit row arithmetic)."""
    z = tf.cast(tf.random.stateless_normal([300, 96], seed=[1, 2]), dtype)
    d_output = tf.cast(tf.random.stateless_normal([300, 96], seed=[3, 4]), dtype)
    step, first_row = tf.constant(7, tf.int64), tf.constant(2**32 + 5, tf.int64)
    mask = tf.cast(keep_mask(300, 96, 0.1, 3, step, first_row, layer=1), dtype) * tf.cast(1.0 / 0.9, dtype)
    outputs, gradients = [], []
    for function in (lambda pre: relu_dropout(pre, 0.1, 3, step, first_row, layer=1),
                     lambda pre: tf.nn.relu(pre) * mask):
        with tf.GradientTape() as tape:
            tape.watch(z)
            output = function(z)
        outputs.append(output.numpy())
        gradients.append(tape.gradient(output, z, output_gradients=d_output).numpy())
    assert np.array_equal(outputs[0], outputs[1])
    assert np.array_equal(gradients[0], gradients[1])  # -0.0 equals 0.0 here
    kept = mask.numpy().astype(np.float32) > 0
    assert 0.85 < kept.mean() < 0.95 and (outputs[0][~kept] == 0).all()
    assert (gradients[0][(z.numpy().astype(np.float32) <= 0) | ~kept] == 0).all()


def test_amp_computes_the_deep_part_in_16_bits_and_stays_close():
    numerical, categorical = batch()
    cfg = config()
    mixed = build_model(cfg, CONTRACT, LocalEmbedding(model_tables(cfg, CONTRACT), seed=cfg.seed), amp=True)
    assert mixed.dense_dtype in (tf.bfloat16, tf.float16)
    assert all(v.dtype == tf.float32 for v in mixed.trainable_variables)
    logits = mixed(numerical, categorical, training=True, step=1, first_row=0)
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(mixed(numerical, categorical).numpy(), model()(numerical, categorical).numpy(),
                               atol=0.05)
