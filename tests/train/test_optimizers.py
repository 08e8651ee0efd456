"""Sparse-aware SGD / Adagrad / Adam: only touched rows (and their slots) change; values are right."""
import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import OptimizerConfig
from dlrm.keras2 import keras
from dlrm.train.optimizers import LossScaledOptimizer, SparseSGD, build_optimizer
from dlrm.train.schedule import ReferenceSchedule

LR = 0.1
CONSTANT = OptimizerConfig(learning_rate=LR, warmup_steps=0, decay_start_step=0, decay_steps=0)
IDS = np.array([1, 4, 1, 7, 4, 1], dtype=np.int32)  # duplicates on purpose
ROWS, DIM = 10, 3


def numpy_update(name, var, slots, grad, step):
    """Reference formulas on numpy arrays (rows already restricted to the touched ones)."""
    if name == "sgd":
        return var - LR * grad, slots
    if name == "adagrad":
        acc = slots["accumulator"] + grad ** 2
        return var - LR * grad / (np.sqrt(acc) + 1e-7), {"accumulator": acc}
    m = 0.9 * slots["m"] + 0.1 * grad
    v = 0.999 * slots["v"] + 0.001 * grad ** 2
    lr_t = LR * np.sqrt(1 - 0.999 ** step) / (1 - 0.9 ** step)
    return var - lr_t * m / (np.sqrt(v) + 1e-7), {"m": m, "v": v}


def make_problem():
    rng = np.random.default_rng(0)
    table = tf.Variable(rng.normal(size=(ROWS, DIM)).astype(np.float32), name="table")
    dense = tf.Variable(rng.normal(size=(DIM,)).astype(np.float32), name="dense")
    weights = rng.normal(size=(len(IDS), DIM)).astype(np.float32)
    return table, dense, weights


def loss_and_grads(table, dense, weights):
    with tf.GradientTape() as tape:
        looked_up = tf.gather(table, IDS)
        loss = tf.reduce_sum(looked_up * weights * dense)
    return tape.gradient(loss, [table, dense])


@pytest.mark.parametrize("name", ["sgd", "adagrad", "adam"])
def test_sparse_update_touches_only_used_rows_and_matches_reference(name):
    table, dense, weights = make_problem()
    optimizer = build_optimizer(OptimizerConfig(**{**CONSTANT.__dict__, "optimizer": name}),
                                ReferenceSchedule(CONSTANT))
    optimizer.build([table, dense])
    expected_slots = {k: s.numpy().copy() for k, s in optimizer.slots_for(table).items()}
    expected_dense_slots = {k: s.numpy().copy() for k, s in optimizer.slots_for(dense).items()}
    expected_table, expected_dense = table.numpy().copy(), dense.numpy().copy()
    touched = np.unique(IDS)
    untouched = np.setdiff1d(np.arange(ROWS), touched)

    @tf.function
    def train_step():
        grads = loss_and_grads(table, dense, weights)
        assert isinstance(grads[0], tf.IndexedSlices)
        optimizer.apply(zip(grads, [table, dense]))

    for step in (1, 2):
        # Reference gradient at the current weights: duplicate rows summed.
        row_grad = np.zeros((ROWS, DIM), np.float64)
        np.add.at(row_grad, IDS, weights * expected_dense)
        dense_grad = (expected_table[IDS] * weights).sum(axis=0)
        new_rows, new_slots = numpy_update(
            name, expected_table[touched], {k: v[touched] for k, v in expected_slots.items()},
            row_grad[touched], step)
        expected_table[touched] = new_rows
        for k in expected_slots:
            expected_slots[k][touched] = new_slots[k]
        expected_dense, expected_dense_slots = numpy_update(
            name, expected_dense, expected_dense_slots, dense_grad, step)
        before = table.numpy().copy()
        slots_before = {k: s.numpy().copy() for k, s in optimizer.slots_for(table).items()}
        train_step()
        np.testing.assert_array_equal(table.numpy()[untouched], before[untouched])
        for k, slot in optimizer.slots_for(table).items():
            np.testing.assert_array_equal(slot.numpy()[untouched], slots_before[k][untouched])
        assert not np.array_equal(table.numpy()[touched], before[touched])
        # float32 vs the float64 reference (Adam's m/sqrt(v) amplifies rounding a little).
        np.testing.assert_allclose(table.numpy(), expected_table, rtol=2e-5, atol=1e-5)
        np.testing.assert_allclose(dense.numpy(), expected_dense, rtol=2e-5, atol=1e-5)
        for k, slot in optimizer.slots_for(table).items():
            np.testing.assert_allclose(slot.numpy(), expected_slots[k], rtol=2e-5, atol=1e-7)
        assert int(optimizer.iterations.numpy()) == step


@pytest.mark.parametrize("name,keras_cls", [
    ("sgd", keras.optimizers.legacy.SGD), ("adagrad", keras.optimizers.legacy.Adagrad),
    ("adam", keras.optimizers.legacy.Adam),
])
def test_dense_updates_match_legacy_keras(name, keras_cls):
    ours = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    theirs = tf.Variable(ours.numpy())
    optimizer = build_optimizer(OptimizerConfig(**{**CONSTANT.__dict__, "optimizer": name}),
                                ReferenceSchedule(CONSTANT))
    keras = keras_cls(learning_rate=LR)
    for step in range(3):
        grad = tf.constant(np.cos(np.arange(12) + step).reshape(4, 3).astype(np.float32))
        optimizer.apply([(grad, ours)])
        keras.apply_gradients([(grad, theirs)])
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)


def test_slot_names_and_state():
    var = tf.Variable(tf.zeros([3, 2]), name="emb")
    expected = {"sgd": [], "adagrad": ["accumulator"], "adam": ["m", "v"]}
    for name, slots in expected.items():
        optimizer = build_optimizer(OptimizerConfig(optimizer=name), ReferenceSchedule(CONSTANT))
        optimizer.build([var])
        assert sorted(optimizer.slots_for(var)) == slots
        assert all(s.shape == var.shape for s in optimizer.slots_for(var).values())
        assert list(optimizer.state_variables()) == ["iterations"]
    with pytest.raises(KeyError, match="build"):
        optimizer.slots_for(tf.Variable(1.0))
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizer(OptimizerConfig(optimizer="lamb"), ReferenceSchedule(CONSTANT))


def test_graph_apply_without_build_is_an_error():
    var = tf.Variable(tf.ones([2]))
    optimizer = SparseSGD(ReferenceSchedule(CONSTANT), name="sgd")
    with pytest.raises(RuntimeError, match="build"):
        tf.function(lambda: optimizer.apply([(tf.ones([2]), var)]))()


def test_learning_rate_follows_the_schedule_through_iterations():
    var = tf.Variable(tf.zeros([1]))
    schedule = ReferenceSchedule(OptimizerConfig(learning_rate=1.0, warmup_steps=4, decay_steps=0))
    optimizer = SparseSGD(schedule, name="sgd")
    for _ in range(6):
        optimizer.apply([(tf.constant([-1.0]), var)])  # var grows by lr each step
    assert var.numpy()[0] == pytest.approx(sum(schedule.value_at(s) for s in range(6)))


def test_loss_scaling_unscales_skips_non_finite_steps_and_grows():
    var = tf.Variable([1.0, 1.0])
    optimizer = LossScaledOptimizer(SparseSGD(ReferenceSchedule(CONSTANT), name="sgd"),
                                    initial_scale=8.0, growth_interval=2)
    optimizer.build([var])
    assert float(optimizer.scale_loss(tf.constant(2.0))) == 16.0
    step = tf.function(lambda g: optimizer.apply([(g, var)]))
    step(tf.constant([8.0, 16.0]))  # scaled gradient (1, 2)
    np.testing.assert_allclose(var.numpy(), [1 - LR, 1 - 2 * LR])
    step(tf.constant([np.inf, 0.0]))  # overflow: skipped, scale halves
    np.testing.assert_allclose(var.numpy(), [1 - LR, 1 - 2 * LR])
    assert float(optimizer.loss_scale.numpy()) == 4.0 and int(optimizer.iterations.numpy()) == 1
    step(tf.constant([4.0, 4.0]))
    step(tf.constant([4.0, 4.0]))  # second good step in a row: scale doubles
    np.testing.assert_allclose(var.numpy(), [1 - 3 * LR, 1 - 4 * LR], rtol=1e-6)
    assert float(optimizer.loss_scale.numpy()) == 8.0
    assert sorted(optimizer.state_variables()) == ["iterations", "loss_scale", "loss_scale_good_steps"]


def test_loss_scaled_sparse_adam_keeps_untouched_rows_in_a_tf_function():
    table = tf.Variable(tf.ones([6, 2]))
    optimizer = LossScaledOptimizer(build_optimizer(OptimizerConfig(optimizer="adam"),
                                                    ReferenceSchedule(CONSTANT)), initial_scale=4.0)
    optimizer.build([table])

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = optimizer.scale_loss(tf.reduce_sum(tf.gather(table, [0, 3, 3])))
        optimizer.apply([(tape.gradient(loss, table), table)])

    step()
    np.testing.assert_array_equal(table.numpy()[[1, 2, 4, 5]], np.ones([4, 2]))
    np.testing.assert_allclose(table.numpy()[[0, 3]], 1 - LR, rtol=1e-5)  # Adam's first step: lr
    assert not optimizer.slots_for(table)["m"].numpy()[[1, 2, 4, 5]].any()


def train_tiny_model(name, steps=2, amp=False, xla=False):
    """A few steps of the real model + optimizer; returns (model, initial table values)."""
    from dlrm.config import ModelConfig
    from dlrm.embedding.local import LocalEmbedding
    from dlrm.model.build import build_model
    from tests.support.contracts import one_hot_contract

    contract = one_hot_contract([20, 30], 4)
    model = build_model(ModelConfig(embedding_dim=4, bottom_mlp=(8, 4), top_mlp=(8, 1), seed=1), contract,
                        LocalEmbedding(contract.tables, seed=1), amp=amp, xla=xla)
    optimizer = build_optimizer(OptimizerConfig(**{**CONSTANT.__dict__, "optimizer": name}),
                                ReferenceSchedule(CONSTANT))
    variables = model.trainable_variables
    optimizer.build(variables)
    initial = [t.numpy().copy() for t in model.embedding_variables]
    rng = np.random.default_rng(0)
    numerical = tf.constant(rng.normal(size=(6, 13)).astype(np.float32))
    categorical = tf.constant([[0, 5], [3, 5], [3, 7], [0, 29], [3, 5], [19, 7]], tf.int32)
    labels = tf.constant([1, 0, 1, 0, 0, 1], tf.float32)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            logits = model(numerical, categorical, training=True)
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
        optimizer.apply(zip(tape.gradient(loss, variables), variables))

    for _ in range(steps):
        step()
    return model, optimizer, initial, categorical.numpy()


@pytest.mark.parametrize("name,amp,xla", [("sgd", True, True), ("adagrad", False, True), ("adam", True, False)])
def test_model_training_updates_only_looked_up_rows(name, amp, xla):
    model, optimizer, initial, ids = train_tiny_model(name, amp=amp, xla=xla)
    for t, table in enumerate(model.embedding_variables):
        used = np.unique(ids[:, t])
        unused = np.setdiff1d(np.arange(table.shape[0]), used)
        np.testing.assert_array_equal(table.numpy()[unused], initial[t][unused])
        assert (table.numpy()[used] != initial[t][used]).any(axis=1).all()
        for slot in optimizer.slots_for(table).values():  # untouched slot rows keep their start value
            np.testing.assert_array_equal(slot.numpy()[unused], np.float32(optimizer.slot_initial_value))
            assert (slot.numpy()[used] != np.float32(optimizer.slot_initial_value)).any(axis=1).all()


def test_training_is_bit_identical_when_repeated():
    first, _, _, _ = train_tiny_model("adam", steps=3)
    second, _, _, _ = train_tiny_model("adam", steps=3)
    for a, b in zip(first.trainable_variables, second.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
