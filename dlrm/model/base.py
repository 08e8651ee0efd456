"""What every recommender model shares: an embedding layer whose shards are model-parallel, and the
split of its trainable variables into those and the data-parallel rest."""
from __future__ import annotations

from typing import List

import tensorflow as tf

from dlrm.embedding.base import EmbeddingCollection
from dlrm.keras2 import keras


class EmbeddingModel(keras.Model):
    """A Keras model with an `embeddings` layer (`EmbeddingCollection`), set by the subclass."""

    embeddings: EmbeddingCollection

    def embedding_ids(self, categorical) -> tf.Tensor:
        """The embedding layer's input for a batch's categorical ids [B, total_hotness]: the ids themselves,
        unless a model derives more (Wide & Deep's crossed features)."""
        return tf.convert_to_tensor(categorical, tf.int32)

    @property
    def embedding_variables(self) -> List[tf.Variable]:
        return list(self.embeddings.trainable_variables)

    @property
    def dense_variables(self) -> List[tf.Variable]:
        """Trainable variables that are data-parallel (allreduced): all but the model-parallel shards."""
        model_parallel = {v.ref() for v in self.embeddings.model_parallel_variables}
        return [v for v in self.trainable_variables if v.ref() not in model_parallel]
