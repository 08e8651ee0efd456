"""LocalEmbedding and the slice-wise deterministic table initialisation."""
import math

import numpy as np
import pytest
import tensorflow as tf

from dlrm.embedding.base import TablePiece
from dlrm.embedding.local import LocalEmbedding, initial_table_values
from dlrm.features import one_hot_tables


@pytest.mark.parametrize("row_range,col_range", [
    ((0, 1000), (0, 16)), ((7, 9), (0, 16)), ((0, 1000), (5, 6)), ((123, 777), (3, 11)),
    ((999, 1000), (15, 16)), ((10, 10), (0, 16)),
])
def test_any_slice_equals_the_same_region_of_the_full_table(row_range, col_range):
    full = initial_table_values(4, 1000, 16, seed=11)
    piece = initial_table_values(4, 1000, 16, seed=11, row_range=row_range, col_range=col_range)
    expected = full[row_range[0]:row_range[1], col_range[0]:col_range[1]]
    assert piece.dtype == np.float32 and piece.shape == expected.shape
    np.testing.assert_array_equal(piece, expected)


def test_slices_tile_the_table_across_chunk_boundaries(monkeypatch):
    import dlrm.embedding.local as local

    full = initial_table_values(0, 300, 8, seed=3)
    monkeypatch.setattr(local, "_CHUNK_ELEMENTS", 24)  # 3 rows per chunk: many chunk boundaries
    tiled = np.concatenate([
        np.concatenate([local.initial_table_values(0, 300, 8, 3, (r, r + 50), (c, c + 4))
                        for c in (0, 4)], axis=1)
        for r in range(0, 300, 50)
    ])
    np.testing.assert_array_equal(tiled, full)


def test_init_is_uniform_in_plus_minus_sqrt_one_over_rows():
    rows = 4000
    values = initial_table_values(2, rows, 32, seed=0)
    bound = math.sqrt(1.0 / rows)
    assert values.min() >= -bound and values.max() < bound
    assert abs(values.mean()) < 0.01 * bound
    assert values.std() == pytest.approx(bound / math.sqrt(3), rel=0.01)  # uniform's std
    assert np.abs(np.corrcoef(values[:, 0], values[:, 1])[0, 1]) < 0.05


def test_init_depends_on_seed_and_table_and_is_reproducible():
    a = initial_table_values(0, 50, 8, seed=1)
    np.testing.assert_array_equal(a, initial_table_values(0, 50, 8, seed=1))
    assert not np.array_equal(a, initial_table_values(0, 50, 8, seed=2))
    assert not np.array_equal(a, initial_table_values(1, 50, 8, seed=1))


def test_slice_outside_the_table_is_an_error():
    with pytest.raises(ValueError, match="table 3.*outside"):
        initial_table_values(3, 10, 4, seed=0, row_range=(5, 11))


def test_lookup_returns_the_initial_rows_and_handles_an_empty_batch():
    sizes, dim = [5, 3, 8], 4
    emb = LocalEmbedding(one_hot_tables(sizes, dim), seed=7)
    ids = np.array([[0, 2, 7], [4, 0, 0], [4, 1, 3]], dtype=np.int32)
    out = emb(tf.constant(ids)).numpy()
    assert out.shape == (3, 3 * dim) and out.dtype == np.float32
    for t, rows in enumerate(sizes):
        np.testing.assert_array_equal(out[:, t * dim:(t + 1) * dim], initial_table_values(t, rows, dim, 7)[ids[:, t]])
    assert emb(tf.zeros([0, 3], tf.int32)).shape == (0, 3 * dim)


def test_gradients_are_sparse_and_pieces_cover_each_table():
    emb = LocalEmbedding(one_hot_tables([6, 9], 2), seed=0)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(emb(tf.constant([[1, 2], [1, 8]], tf.int32)))
    grads = tape.gradient(loss, emb.table_variables)
    assert all(isinstance(g, tf.IndexedSlices) for g in grads)
    assert sorted(grads[0].indices.numpy().tolist()) == [1, 1]
    assert [p for p, _ in emb.stored_pieces()] == [TablePiece(0, 0, 6, 0, 2), TablePiece(1, 0, 9, 0, 2)]
    assert emb.held_pieces() == emb.stored_pieces()
    assert emb.model_parallel_variables == []
    assert [v.name for v in emb.trainable_variables] == ["embedding_table_0:0", "embedding_table_1:0"]


def test_wrong_number_of_id_columns_is_an_error():
    emb = LocalEmbedding(one_hot_tables([6, 9], 2), seed=0)
    with pytest.raises(ValueError, match=r"\[batch, 2\]"):
        emb(tf.zeros([4, 3], tf.int32))
