"""Sharded, atomic checkpoints that any world size can restore (layout: docs/training.md, "Checkpoints").

```
<root>/latest                                   name of the last complete checkpoint
<root>/step_00000100/meta.json                  step, world size, reader position, shapes, config
<root>/step_00000100/manifest.json              every file's size and CRC32 (written last)
<root>/step_00000100/dense/<key>.npy            data-parallel variables and their slots (rank 0)
<root>/step_00000100/embedding/<table name>/<slot>/r<row0>-<row1>_c<col0>-<col1>.npy
```

Protocol: rank 0 clears a stale `step_X.tmp` and creates it; the ranks agree; every rank writes its
pieces (rank 0 also the dense variables and meta.json); the ranks agree and gather every file's size and
CRC32, which rank 0 writes to manifest.json; rank 0 fsyncs, renames the directory to `step_X`, then
replaces `latest` (temp file + rename) and prunes old checkpoints (each renamed to `step_X.deleting`
before it is deleted). A directory named `step_X` therefore only exists complete, and a kill at any
moment leaves the previous checkpoint loadable. `latest` that is empty, garbled or points nowhere is
ignored in favour of the newest complete directory. If one rank fails to write, rank 0 removes
`step_X.tmp` and every rank stops with one message (`protocol.raise_agreed`).

A run holds `<root>/lock` (see `prepare_checkpoint_dir`) so two runs never write one directory.

Before anything reads a checkpoint (restore for training, evaluation, inference, export), the ranks verify
it together (`verify`: every file's size and CRC32 against the manifest, every array finite) and refuse a
damaged one with one message naming the file; a resuming run falls back to its newest checkpoint that
verifies (`restore.training_source`). Checkpoints of formats 1 and 2 (no manifest) are checked for
readable, finite arrays.

Restore fills each *held* piece from the saved pieces of its table (found by the table's name) that
overlap it, so a checkpoint written by one plan / world size restores into another. Checkpoints of
format 1 (tables by position, `embedding/t<i>/`) still restore: table i of the model reads `t<i>`.
`model_shape` records and compares the model's tables by name, numerical features and dense sizes.

Modules by job: `files` (names, .npy writing, reading regions), `directory` (lock, writable and space
checks, publishing, pruning; finding a checkpoint and reading its meta.json live in `dlrm.checkpoint_layout`,
which the command line reads without TensorFlow), `protocol` (save / restore / prepare with every rank together),
`model_shape`, `verify`; on top of them, for a training run's `Parts`: `saving` (when and what a run saves) and
`restore` (where a run resumes from, and the restore of every mode). Those two import `train.build`,
which imports this package, so they are imported by module, not from here.
"""
from dlrm.train.checkpoint.directory import (
    LATEST,
    LOCK,
    META,
    CheckpointDirLock,
    complete_checkpoints,
    find_checkpoint,
    read_meta,
)
from dlrm.train.checkpoint.files import (
    FILE_OVERHEAD_BYTES,
    META_BYTES,
    CheckpointError,
    PieceSlots,
    checkpoint_bytes,
    piece_file_name,
    read_region,
    saved_pieces,
    step_dir_name,
    table_dir_name,
)
from dlrm.train.checkpoint.model_shape import model_shape, table_records
from dlrm.train.checkpoint.protocol import (
    FORMAT_VERSION,
    check_compatible,
    prepare_checkpoint_dir,
    read_arrays,
    restore_checkpoint,
    save_checkpoint,
)
from dlrm.train.checkpoint.verify import MANIFEST, check_share

__all__ = [
    "LATEST", "LOCK", "META", "MANIFEST", "FORMAT_VERSION", "FILE_OVERHEAD_BYTES", "META_BYTES", "CheckpointDirLock",
    "CheckpointError", "check_share", "PieceSlots", "check_compatible", "checkpoint_bytes", "complete_checkpoints",
    "find_checkpoint", "piece_file_name", "prepare_checkpoint_dir", "read_arrays", "read_meta", "read_region",
    "model_shape", "restore_checkpoint", "save_checkpoint", "saved_pieces", "step_dir_name", "table_dir_name",
    "table_records",
]
