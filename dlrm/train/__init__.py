"""Training: learning-rate schedule, sparse-aware optimizers, evaluation, the loop and checkpoints."""
