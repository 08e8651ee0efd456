"""Reference learning-rate schedule: warmup, constant, polynomial decay, clamp; graph == Python."""
import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import OptimizerConfig
from dlrm.train.schedule import ReferenceSchedule

REFERENCE = OptimizerConfig()  # lr 24, warmup 8000, decay from 48000 over 24000, power 2, end 0


@pytest.mark.parametrize("step,lr", [
    (0, 0.0), (1, 24.0 / 8000), (4000, 12.0), (7999, 24.0 * 7999 / 8000), (8000, 24.0),
    (30000, 24.0), (47999, 24.0), (48000, 24.0), (54000, 24.0 * 0.75 ** 2), (60000, 6.0),
    (71999, 24.0 * (1 / 24000) ** 2), (72000, 0.0), (96000, 0.0), (10**7, 0.0),
])
def test_reference_schedule_values(step, lr):
    schedule = ReferenceSchedule(REFERENCE)
    assert schedule.value_at(step) == pytest.approx(lr, abs=1e-12)
    assert float(schedule(step)) == pytest.approx(lr, rel=1e-6, abs=1e-9)


def test_clamped_past_the_end_unlike_the_unclamped_polynomial():
    schedule = ReferenceSchedule(OptimizerConfig(end_learning_rate=0.5))
    # The unclamped polynomial (NVIDIA) would give 0.5 + 23.5 * (1 - 2)^2 = 24 at step 96000.
    assert schedule.value_at(96000) == 0.5
    assert schedule.value_at(60000) == pytest.approx(0.5 + 23.5 * 0.25)


def test_graph_schedule_equals_python_schedule_for_a_step_tensor():
    schedule = ReferenceSchedule(OptimizerConfig(warmup_steps=10, decay_start_step=20,
                                                 decay_steps=30, learning_rate=2.0))
    steps = tf.range(0, 80, dtype=tf.int64)
    graph = tf.function(lambda s: tf.map_fn(schedule, s, fn_output_signature=tf.float32))(steps)
    python = np.array([schedule.value_at(s) for s in range(80)], dtype=np.float32)
    np.testing.assert_allclose(graph.numpy(), python, rtol=1e-6, atol=1e-9)
    assert graph.dtype == tf.float32


def test_no_warmup_and_no_decay():
    schedule = ReferenceSchedule(OptimizerConfig(learning_rate=0.1, warmup_steps=0, decay_steps=0,
                                                 decay_start_step=0))
    assert [schedule.value_at(s) for s in (0, 5, 10**6)] == [0.1, 0.1, 0.1]
    assert float(schedule(0)) == pytest.approx(0.1)


def test_decay_starting_inside_the_warmup_is_rejected():
    with pytest.raises(ValueError, match="decay_start_step"):
        ReferenceSchedule(OptimizerConfig(warmup_steps=100, decay_start_step=50))
