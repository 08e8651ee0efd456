"""DLRM / DCNv2 models: interaction values, shapes, empty batches, precision and XLA variants."""
import math

import numpy as np
import pytest
import tensorflow as tf

from dlrm.config import ModelConfig
from dlrm.embedding.local import LocalEmbedding
from dlrm.model.build import build_model
from dlrm.model.dcnv2 import LowRankCrossNetwork
from dlrm.model.interaction import dot_interaction, dot_interaction_output_dim, reference_dot_interaction
from dlrm.model.mlp import MLP
from dlrm.model.shape_rules import ModelShapeError
from tests.support.tiny_model import CONTRACT, DIM, SIZES, as_blocks, tiny_batch, tiny_config, tiny_model


def numpy_dot_interaction(bottom, embedded):
    """Reference: loops over the strict lower triangle (i > j), row-major."""
    out = []
    for b in range(bottom.shape[0]):
        features = np.concatenate([bottom[b][None], embedded[b]], axis=0)
        pairs = [features[i] @ features[j] for i in range(len(features)) for j in range(i)]
        out.append(np.concatenate([bottom[b], pairs]))
    return np.array(out)


def test_dot_interaction_matches_numpy_reference():
    rng = np.random.default_rng(1)
    bottom = rng.normal(size=(3, 5)).astype(np.float32)
    embedded = rng.normal(size=(3, 4, 5)).astype(np.float32)
    out = dot_interaction(tf.constant(bottom), [tf.constant(embedded.reshape(3, 20))]).numpy()
    assert out.shape == (3, dot_interaction_output_dim(4, 5)) == (3, 5 + 10)
    np.testing.assert_allclose(out, numpy_dot_interaction(bottom, embedded), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [0, 1, 6])
@pytest.mark.parametrize("tables_per_block", [(4,), (1, 1, 1, 1), (1, 3)])
def test_dot_interaction_gradient_matches_autodiff_of_the_plain_formulation(dtype, batch, tables_per_block):
    rng = np.random.default_rng(batch)
    bottom = tf.cast(rng.normal(size=(batch, 5)), dtype)
    embedded = tf.cast(rng.normal(size=(batch, 4, 5)), dtype)
    weights = tf.cast(rng.normal(size=(batch, dot_interaction_output_dim(4, 5))), dtype)

    @tf.function
    def value_and_gradients(interaction):
        with tf.GradientTape() as tape:
            tape.watch([bottom, embedded])
            out = interaction(bottom, embedded)  # the gradient reaches `embedded` through the blocks
            loss = tf.reduce_sum(tf.cast(out * weights, tf.float32))
        return [out, *tape.gradient(loss, [bottom, embedded])]

    got = value_and_gradients(lambda bottom, embedded: dot_interaction(bottom, as_blocks(embedded, tables_per_block)))
    want = value_and_gradients(reference_dot_interaction)
    tolerance = 1e-5 if dtype == "float32" else 3e-2
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == tf.as_dtype(dtype) and g.shape == w.shape
        np.testing.assert_allclose(tf.cast(g, tf.float32), tf.cast(w, tf.float32), rtol=tolerance, atol=tolerance)


def test_reference_dimensions_give_479_interaction_outputs():
    assert dot_interaction_output_dim(26, 128) == 479


def test_cross_network_matches_formula():
    rng = np.random.default_rng(2)
    x0 = rng.normal(size=(4, 6)).astype(np.float32)
    cross = LowRankCrossNetwork(6, num_layers=2, projection_dim=3, seed=0)
    x = x0
    for down, up in zip(cross.down, cross.up):
        x = x0 * (x @ down.kernel.numpy() @ up.kernel.numpy() + up.bias.numpy()) + x
    np.testing.assert_allclose(cross(tf.constant(x0)).numpy(), x, rtol=1e-5, atol=1e-6)


def test_mlp_initialisation_is_glorot_normal_kernel_and_reference_bias():
    mlp = MLP(400, (600, 1), relu_last=False, seed=3)
    kernel, bias = mlp.dense_layers[0].kernel.numpy(), mlp.dense_layers[0].bias.numpy()
    # Keras' GlorotNormal is a truncated normal scaled to std sqrt(2 / (fan_in + fan_out)).
    assert kernel.std() == pytest.approx(math.sqrt(2.0 / 1000), rel=0.03)
    assert bias.std() == pytest.approx(math.sqrt(1.0 / 600), rel=0.15)
    assert mlp(tf.zeros([2, 400])).shape == (2, 1)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("relu_last", [True, False])
def test_mlp_values_and_gradients_match_its_dense_layers_under_autodiff(policy, relu_last):
    mlp = MLP(7, (9, 5), relu_last=relu_last, seed=1, dtype=policy)
    x = tf.constant(np.random.default_rng(0).normal(size=(6, 7)), tf.float32)
    variables = mlp.trainable_variables

    @tf.function
    def value_and_gradients(forward):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = forward(x)
            loss = tf.reduce_sum(tf.cast(out, tf.float32) * tf.range(1.0, 6.0))
        return [out, *tape.gradient(loss, [x, *variables])]

    def keras_layers(inputs):
        for layer in mlp.dense_layers:
            inputs = layer(inputs)
        return inputs

    got, want = value_and_gradients(mlp), value_and_gradients(keras_layers)
    assert len(got) == 2 + 2 * 2 and got[0].dtype == tf.as_dtype(mlp.compute_dtype)
    tolerance = 1e-6 if policy == "float32" else 1e-2
    for g, w in zip(got, want):
        np.testing.assert_allclose(tf.cast(g, tf.float32), tf.cast(w, tf.float32), rtol=tolerance, atol=tolerance)
    if not relu_last:  # the last layer is linear: negative outputs survive
        assert np.any(tf.cast(got[0], tf.float32).numpy() < 0)


@pytest.mark.parametrize("arch", ["dlrm", "dcnv2"])
def test_model_gives_one_float32_logit_per_row_and_handles_empty_batches(arch):
    model = tiny_model(tiny_config(arch))
    logits = model(*tiny_batch(5))
    assert logits.shape == (5,) and logits.dtype == tf.float32
    assert np.isfinite(logits.numpy()).all()
    empty = model(*tiny_batch(0))
    assert empty.shape == (0,) and empty.dtype == tf.float32
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(*tiny_batch(0), training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    # an empty batch trains nothing: every gradient exists and is exactly zero (no NaN from 0/0)
    for grad in grads:
        values = grad.values if isinstance(grad, tf.IndexedSlices) else grad
        assert values is not None and np.all(tf.convert_to_tensor(values).numpy() == 0)


def test_dcnv2_parameter_shapes():
    model = tiny_model(tiny_config("dcnv2"))
    cross_in = DIM + len(SIZES) * DIM
    assert [layer.kernel.shape for layer in model.cross.down] == [(cross_in, 4)] * 3
    assert [layer.kernel.shape for layer in model.cross.up] == [(4, cross_in)] * 3
    assert model.top_mlp.dense_layers[0].kernel.shape == (cross_in, 32)


def test_same_seed_same_model_and_unique_variable_names():
    a = tiny_model(tiny_config(seed=5))
    b = tiny_model(tiny_config(seed=5))
    for va, vb in zip(a.trainable_variables, b.trainable_variables):
        np.testing.assert_array_equal(va.numpy(), vb.numpy())
    names = [v.name for v in a.trainable_variables]
    assert len(set(names)) == len(names), names
    c = tiny_model(tiny_config(seed=6))
    assert not np.array_equal(a.top_mlp.dense_layers[0].kernel.numpy(),
                              c.top_mlp.dense_layers[0].kernel.numpy())


@pytest.mark.parametrize("arch", ["dlrm", "dcnv2"])
@pytest.mark.parametrize("amp,xla", [(False, True), (True, False), (True, True)])
def test_amp_and_xla_variants_match_float32(arch, amp, xla):
    reference = tiny_model(tiny_config(arch))
    variant = tiny_model(tiny_config(arch), amp=amp, xla=xla)
    batch = tiny_batch(6)
    expected = reference(*batch).numpy()
    with tf.GradientTape() as tape:
        logits = variant(*batch, training=True)
    assert logits.dtype == tf.float32
    np.testing.assert_allclose(logits.numpy(), expected, rtol=0.05 if amp else 1e-4,
                               atol=0.05 if amp else 1e-5)
    grads = tape.gradient(logits, variant.trainable_variables)
    for table, grad in zip(variant.embedding_variables, grads):
        assert isinstance(grad, tf.IndexedSlices) and grad.values.dtype == tf.float32
    assert all(v.dtype == tf.float32 for v in variant.trainable_variables)
    assert variant(*tiny_batch(0)).shape == (0,)


def test_dense_variables_exclude_model_parallel_embedding_variables():
    class ShardedLike(LocalEmbedding):
        @property
        def model_parallel_variables(self):
            return self.table_variables[:2]

    model = build_model(tiny_config(), CONTRACT, ShardedLike(CONTRACT.tables, seed=0))
    dense = {v.ref() for v in model.dense_variables}
    assert all(t.ref() not in dense for t in model.embedding_variables[:2])
    assert all(t.ref() in dense for t in model.embedding_variables[2:])
    assert len(model.dense_variables) == len(model.trainable_variables) - 2
    assert len(model.embedding_variables) == len(SIZES)


def test_configuration_errors_are_explained():
    with pytest.raises(ModelShapeError, match=r"every table's dim must equal the bottom MLP's last layer \(4, "
                                              r"--bottom_mlp_dims\); differing: 'cat_0' \(dim 8\), 'cat_1'"):
        tiny_model(ModelConfig(embedding_dim=DIM, bottom_mlp=(16, 4), top_mlp=(8, 1)))
    with pytest.raises(ValueError, match="arch"):
        tiny_model(ModelConfig(arch="wide", embedding_dim=DIM))
    with pytest.raises(ValueError, match="1 unit"):
        tiny_model(ModelConfig(embedding_dim=DIM, bottom_mlp=(DIM,), top_mlp=(8, 2)))


def test_amp_computes_in_bfloat16_on_cpu_with_float32_variables():
    from dlrm.model.precision import compute_dtype, keras_policy, needs_loss_scaling

    assert tf.config.list_logical_devices("GPU") == []  # this suite runs on CPU
    assert compute_dtype(False) == tf.float32 and keras_policy(False) == "float32"
    assert compute_dtype(True) == tf.bfloat16 and keras_policy(True) == "mixed_bfloat16"
    assert not needs_loss_scaling(True) and not needs_loss_scaling(False)
    model = tiny_model(tiny_config(), amp=True)
    assert model.dense_dtype == tf.bfloat16
    assert model.top_mlp.dense_layers[0].compute_dtype == "bfloat16"
    assert model.top_mlp.dense_layers[0].kernel.dtype == tf.float32
    assert all(t.dtype == tf.float32 for t in model.embedding_variables)


X86_CPUINFO = """processor\t: 0
model name\t: Some x86 CPU
flags\t\t: fpu sse avx2 fma {extra}
vmx flags\t: vnmi preemption_timer
"""
ARM_CPUINFO = """processor\t: 0
Features\t: fp asimd evtstrm {extra}
CPU implementer\t: 0x41
"""


@pytest.mark.parametrize("cpuinfo, extra, native", [
    (X86_CPUINFO, "avx512f avx512_bf16", True), (X86_CPUINFO, "amx_bf16 amx_tile", True),
    (X86_CPUINFO, "avx512f avx512_vnni", False), (X86_CPUINFO, "", False),
    (ARM_CPUINFO, "sve bf16", True), (ARM_CPUINFO, "sve", False)])
def test_amp_note_says_whether_this_cpu_computes_bfloat16_natively(tmp_path, cpuinfo, extra, native):
    """--amp on CPU computes in bfloat16: native with AVX512-BF16 / AMX (x86) or BF16 (Arm), emulated and
    slower than float32 elsewhere, which the start-up line says (read from a given /proc/cpuinfo)."""
    from dlrm.cpu_info import cpu_flags, cpu_model, native_bf16
    from dlrm.model.precision import amp_note

    path = tmp_path / "cpuinfo"
    path.write_text(cpuinfo.format(extra=extra))
    flags = cpu_flags(str(path))
    assert "vnmi" not in flags and ("fma" in flags or "asimd" in flags)
    assert native_bf16(flags) == native
    assert amp_note(False, flags) is None
    note = amp_note(True, flags)
    assert note is not None
    if native:
        assert note == "--amp: the dense part computes in bfloat16 (this CPU has bfloat16 instructions)"
    else:
        assert note.startswith("warning: --amp: this CPU has no bfloat16 instructions")
        assert "slower than float32" in note
    if cpuinfo == X86_CPUINFO:
        assert cpu_model(str(path)) == "Some x86 CPU"
    assert cpu_flags(str(tmp_path / "absent")) == frozenset()
