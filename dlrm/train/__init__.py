"""Training: learning-rate schedule, sparse-aware optimizers, evaluation, the loop and checkpoints.

`run.run(config)` is the entry point: it starts the process group and checks the data (on the MPI backend
before TensorFlow loads), then `modes` builds the parts and runs the mode.
Modules by job, from the bottom up: `build` (TensorFlow set-up and the typed `Parts`), `dataset`,
`step` (compiled train and predict steps), `evaluation`, `stopping`, `metrics_log`, `loop` (the training
loop), `modes`, `run`; the `checkpoint` package holds everything about checkpoints: the on-disk format, its
save/restore protocol, when and what a run saves, and where it resumes from.
"""
