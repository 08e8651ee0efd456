"""Training: learning-rate schedule, sparse-aware optimizers, evaluation, the loop and checkpoints.

`modes.run(config)` is the entry point: it starts the process group and dispatches to the mode.
Modules by job, from the bottom up: `build` (TensorFlow set-up and the typed `Parts`), `dataset`,
`step` (compiled train and predict steps), `evaluation`, `stopping`, `metrics_log`, `loop` (the training
loop), `modes`; the `checkpoint` package holds everything about checkpoints: the on-disk format, its
save/restore protocol, when and what a run saves, and where it resumes from.
"""
