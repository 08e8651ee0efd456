"""Wide & Deep's optimizers: FTRL and RMSProp against Keras' legacy ones, sparse (lazy) updates that leave
unseen rows and their slots bit-identical, the group that routes each variable, slot and state names, and
the deep learning-rate schedule."""
import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import OptimizerConfig
from dlrm.embedding.optimizer_slots import SLOT_NAMES, slots_for_optimizer
from dlrm.keras2 import keras
from dlrm.train.optimizers import (
    LossScaledOptimizer,
    OptimizerGroup,
    SparseAdagrad,
    SparseFtrl,
    SparseRMSprop,
    build_widedeep_optimizer,
)
from dlrm.train.schedule import ConstantSchedule, GroupSchedule, WideDeepSchedule

LR = 0.05
IDS = np.array([1, 4, 1, 7], dtype=np.int32)  # row 1 twice
ROWS, DIM = 9, 3


def grads(step: int) -> tf.Tensor:
    return tf.constant(np.cos(np.arange(12) * 0.7 + step).reshape(4, 3).astype(np.float32))


@pytest.mark.parametrize("ours,keras", [
    (lambda: SparseFtrl(ConstantSchedule(LR), name="ftrl"), lambda: keras.optimizers.legacy.Ftrl(LR)),
    (lambda: SparseFtrl(ConstantSchedule(LR), name="ftrl", initial_accumulator=1e-6),
     lambda: keras.optimizers.legacy.Ftrl(LR, initial_accumulator_value=1e-6)),
    (lambda: SparseRMSprop(ConstantSchedule(LR), name="rms", rho=0.5),
     lambda: keras.optimizers.legacy.RMSprop(LR, rho=0.5)),
    (lambda: SparseRMSprop(ConstantSchedule(LR), name="rms"), lambda: keras.optimizers.legacy.RMSprop(LR)),
], ids=["ftrl", "ftrl_small_accumulator", "rmsprop_rho_0.5", "rmsprop_rho_0.9"])
def test_dense_updates_match_legacy_keras(ours, keras):
    mine = tf.Variable(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3))
    theirs = tf.Variable(mine.numpy())
    optimizer, reference = ours(), keras()
    optimizer.build([mine])
    for step in range(4):
        optimizer.apply([(grads(step), mine)])
        reference.apply_gradients([(grads(step), theirs)])
    np.testing.assert_allclose(mine.numpy(), theirs.numpy(), rtol=1e-5, atol=1e-6)
    for name in optimizer.slot_names:  # Keras' legacy slot names: accumulator/linear, rms
        np.testing.assert_allclose(optimizer.slots_for(mine)[name].numpy(), reference.get_slot(theirs, name).numpy(),
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [lambda: SparseFtrl(ConstantSchedule(LR), name="ftrl"),
                                  lambda: SparseRMSprop(ConstantSchedule(LR), name="rms", rho=0.5)],
                         ids=["ftrl", "rmsprop"])
def test_sparse_updates_touch_only_seen_rows_and_equal_the_dense_update_there(make):
    rng = np.random.default_rng(0)
    start = rng.normal(size=(ROWS, DIM)).astype(np.float32)
    sparse_var, dense_var = tf.Variable(start), tf.Variable(start[np.unique(IDS)])
    sparse, dense = make(), make()
    sparse.build([sparse_var])
    dense.build([dense_var])
    weights = rng.normal(size=(len(IDS), DIM)).astype(np.float32)
    unseen = np.setdiff1d(np.arange(ROWS), IDS)
    slots_before = {k: v.numpy().copy() for k, v in sparse.slots_for(sparse_var).items()}

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(sparse_var, IDS) ** 2 * weights)
        grad = tape.gradient(loss, sparse_var)
        assert isinstance(grad, tf.IndexedSlices)
        sparse.apply([(grad, sparse_var)])
        return tf.math.unsorted_segment_sum(grad.values, tf.searchsorted(np.unique(IDS), grad.indices), 3)

    for _ in range(2):
        summed = step()  # the seen rows' summed gradient, as a dense update of just those rows
        dense.apply([(summed, dense_var)])
        np.testing.assert_array_equal(sparse_var.numpy()[unseen], start[unseen])  # bit-identical
        for name, slot in sparse.slots_for(sparse_var).items():
            np.testing.assert_array_equal(slot.numpy()[unseen], slots_before[name][unseen])
            np.testing.assert_allclose(slot.numpy()[np.unique(IDS)], dense.slots_for(dense_var)[name].numpy(),
                                       rtol=1e-6)
        np.testing.assert_allclose(sparse_var.numpy()[np.unique(IDS)], dense_var.numpy(), rtol=1e-6, atol=1e-7)
        assert not np.allclose(sparse_var.numpy()[np.unique(IDS)], start[np.unique(IDS)])


def widedeep_group(deep_optimizer="rmsprop", amp=False):
    wide_table, wide_bias = tf.Variable(tf.zeros([5, 1]), name="w"), tf.Variable(tf.zeros([1]), name="b")
    deep_table, kernel = tf.Variable(tf.ones([5, 2]), name="d"), tf.Variable(tf.ones([2, 1]), name="k")
    deep = WideDeepSchedule(0.1, warmup_epochs=0, epochs=2)
    deep.set_steps_per_epoch(10)
    wide_vars = {wide_table.ref(), wide_bias.ref()}
    optimizer = build_widedeep_optimizer(OptimizerConfig(deep_optimizer=deep_optimizer), deep, ConstantSchedule(0.5),
                                         lambda v: v.ref() in wide_vars, amp=amp)
    variables = [wide_table, wide_bias, deep_table, kernel]
    optimizer.build(variables)
    return optimizer, variables


def test_the_group_routes_wide_variables_to_ftrl_and_the_rest_to_the_deep_optimizer():
    group, (wide_table, wide_bias, deep_table, kernel) = widedeep_group()
    assert isinstance(group, OptimizerGroup)
    assert isinstance(group.groups["wide"], SparseFtrl) and isinstance(group.groups["deep"], SparseRMSprop)
    assert group.groups["deep"].rho == 0.5  # NVIDIA's code
    assert sorted(group.slots_for(wide_table)) == ["accumulator", "linear"]
    assert sorted(group.slots_for(kernel)) == ["rms"] and sorted(group.slots_for(deep_table)) == ["rms"]
    assert sorted(group.state_variables()) == ["deep.iterations", "wide.iterations"]
    grad = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([3]), tf.constant([5, 2]))
    group.apply([(tf.IndexedSlices(tf.ones([1, 1]), tf.constant([2]), tf.constant([5, 1])), wide_table),
                 (tf.ones([1]), wide_bias), (grad, deep_table), (tf.ones([2, 1]), kernel)])
    # FTRL's first step from zero: -lr * g / sqrt(0.1 + g^2); RMSprop's: -lr * g / (sqrt((1 - rho) g^2) + eps)
    np.testing.assert_allclose(wide_bias.numpy(), [-0.5 / np.sqrt(1.1)], rtol=1e-6)
    np.testing.assert_allclose(wide_table.numpy()[:, 0], [0, 0, -0.5 / np.sqrt(1.1), 0, 0], rtol=1e-6)
    np.testing.assert_allclose(kernel.numpy(), 1 - 0.025 / (np.sqrt(0.5) + 1e-7), rtol=1e-6)  # lr 0.1 / 4
    assert np.array_equal(deep_table.numpy()[[0, 1, 2, 4]], np.ones([4, 2]))
    assert int(group.iterations.numpy()) == 1 and all(int(v.numpy()) == 1 for v in group.state_variables().values())
    assert group.schedule.learning_rates_at(0) == {"lr_deep": 0.025, "lr_wide": 0.5}
    adagrad, (_, _, _, kernel) = widedeep_group("adagrad")
    assert isinstance(adagrad.groups["deep"], SparseAdagrad) and sorted(adagrad.slots_for(kernel)) == ["accumulator"]


def test_the_group_works_under_loss_scaling():
    inner, variables = widedeep_group()
    scaled = LossScaledOptimizer(inner)
    scaled.apply([(tf.ones_like(v) * 2.0**15, v) for v in variables[1:2]])
    np.testing.assert_allclose(variables[1].numpy(), [-0.5 / np.sqrt(1.1)], rtol=1e-6)
    assert "deep.iterations" in scaled.state_variables() and "loss_scale" in scaled.state_variables()


def test_a_small_initial_accumulator_lets_a_rare_id_learn_from_batch_mean_gradients():
    """One id's gradient under a batch-mean loss is ~1/batch: against Keras' 0.1 its FTRL weight barely
    moves; with a tiny one its first step is hundreds of times larger."""
    moved = {}
    for initial in (0.1, 1e-6):
        table = tf.Variable(tf.zeros([4, 1]))
        ftrl = SparseFtrl(ConstantSchedule(0.2), name=f"ftrl_{initial}", initial_accumulator=initial)
        ftrl.build([table])
        ftrl.apply([(tf.IndexedSlices(tf.constant([[1.0 / 4096]]), tf.constant([2])), table)])
        moved[initial] = abs(float(table[2, 0]))
    assert moved[0.1] < 0.001 and moved[1e-6] > 100 * moved[0.1]


def test_ftrl_refuses_a_non_positive_initial_accumulator():
    with pytest.raises(ValueError, match="initial accumulator"):
        SparseFtrl(ConstantSchedule(LR), name="ftrl", initial_accumulator=0.0)


def test_slot_lists_and_planner_counts():
    assert SLOT_NAMES["ftrl"] == ("accumulator", "linear") and SLOT_NAMES["rmsprop"] == ("rms",)
    assert slots_for_optimizer("ftrl") == 2


@pytest.mark.parametrize("step,factor", [(0, 0.0), (30, 0.5), (59, 59 / 60), (60, 0.25), (130, 0.25),
                                         (131, 0.125), (199, 0.125), (500, 0.125)])
def test_deep_schedule_warms_up_then_quarter_then_eighth(step, factor):
    # 10 steps per epoch, 20 epochs, 6 warmup epochs: warmup to step 60, base/4 until epoch 6 + 7 = 13
    schedule = WideDeepSchedule(0.00012, warmup_epochs=6, epochs=20)
    schedule.set_steps_per_epoch(10)
    assert schedule.value_at(step) == pytest.approx(0.00012 * factor, rel=1e-12)
    assert float(schedule(tf.constant(step, tf.int64))) == pytest.approx(0.00012 * factor, rel=1e-6)


def test_deep_schedule_without_warmup_and_its_use_before_the_epoch_length_is_known():
    schedule = WideDeepSchedule(1.0, warmup_epochs=0, epochs=3)
    with pytest.raises(RuntimeError, match="set_steps_per_epoch"):
        schedule.value_at(0)
    schedule.set_steps_per_epoch(4)
    assert [schedule.value_at(s) for s in (0, 6, 7)] == [0.25, 0.25, 0.125]
    group = GroupSchedule({"deep": schedule, "wide": ConstantSchedule(0.02)})
    assert group.value_at(7) == 0.125 and group.learning_rates_at(7) == {"lr_deep": 0.125, "lr_wide": 0.02}
