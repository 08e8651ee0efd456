"""Command-line flags -> `Config`: the only place where flags become configuration.

Flag names follow NVIDIA's TF2 DLRM scripts where they have one (`--dataset_path`,
`--global_batch_size`, `--bottom_mlp_dims`, ...). Defaults are the reference configuration
(`dlrm.config`). Without `--dataset_path` the run uses the embedded synthetic dataset and the
`DEMO_PRESET` below is applied first, so that `python main.py` finishes in a few minutes on a laptop;
flags given explicitly always win over the preset.

Every flag is declared with `argparse.SUPPRESS` as its default, so the parsed namespace holds only
the flags the user actually typed; that is how the demo preset and the reference defaults coexist.
"""
from __future__ import annotations

import argparse
from typing import Callable, Optional, Sequence

from dlrm.argtypes import (
    DEBUG_HELP,
    ArgumentParser,
    count,
    layer_sizes,
    non_negative_number,
    positive_int,
    positive_number,
    seed,
    show_default,
)
from dlrm.config import ARCHS, Config
from dlrm.data.presets import SYNTHETIC_PRESET_NAMES
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES
from dlrm.embedding.planner import STRATEGIES, byte_size, positive_byte_size
from dlrm.features import COMBINERS

# The embedded demo (no --dataset_path): the tiny synthetic preset, a smaller model and batch, and an
# optimizer that converges in one short epoch on 2 CPU cores. Measured in docs/training.md.
DEMO_PRESET: dict[tuple[str, str], object] = {
    ("data", "global_batch_size"): 2048,
    ("data", "eval_batch_size"): 16384,
    ("model", "embedding_dim"): 16,
    ("model", "bottom_mlp"): (64, 32, 16),
    ("model", "top_mlp"): (256, 128, 1),
    ("model", "cross_projection_dim"): 64,
    ("optimizer", "optimizer"): "adam",
    ("optimizer", "learning_rate"): 0.01,
    ("optimizer", "warmup_steps"): 50,
    ("optimizer", "decay_start_step"): 200,
    ("optimizer", "decay_steps"): 312,
    ("optimizer", "end_learning_rate"): 0.001,
    ("train", "eval_every_steps"): 128,
    ("train", "log_every_steps"): 20,
    ("train", "run_dir"): "runs/demo",
}


# flag dest -> the (section, field) pairs it sets. One row per flag; no **kwargs splatting.
_FLAG_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {}


def _add(group, flag: str, targets: Sequence[tuple[str, str]], help: str,
         type: Optional[Callable] = None, choices=None, action: Optional[str] = None) -> None:
    dest = flag.lstrip("-")
    defaults = Config()
    section, name = targets[0]
    shown = getattr(getattr(defaults, section), name)
    demo = DEMO_PRESET.get((section, name))
    suffix = f" (default: {show_default(shown)}" + (f"; demo: {show_default(demo)})" if demo is not None else ")")
    kwargs: dict[str, object] = {"dest": dest, "help": help + suffix}
    if action:
        kwargs["action"] = action
    else:
        kwargs["type"] = type or str
        if choices:
            kwargs["choices"] = choices
    group.add_argument(flag, **kwargs)
    _FLAG_FIELDS[dest] = tuple(targets)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="main.py",
        description="Train / evaluate DLRM or DCNv2 on a split-binary Criteo-format dataset. Without "
                    "--dataset_path, a small synthetic dataset is generated and the demo preset is used.",
        argument_default=argparse.SUPPRESS,
    )
    _FLAG_FIELDS.clear()
    for add_flags in (_data_flags, _model_flags, _optimizer_flags, _placement_flags, _run_flags):
        add_flags(parser)
    return parser


def _data_flags(parser: argparse.ArgumentParser) -> None:
    data = parser.add_argument_group("data")
    _add(data, "--dataset_path", [("data", "dataset_dir")], "split-binary dataset directory (feature_spec.yaml)")
    _add(data, "--synthetic_dir", [("data", "synthetic_dir")], "where the embedded synthetic dataset lives")
    _add(data, "--synthetic_preset", [("data", "synthetic_preset")], "table-size preset of the synthetic dataset",
         choices=SYNTHETIC_PRESET_NAMES)
    _add(data, "--synthetic_train_rows", [("data", "synthetic_train_rows")], "synthetic training rows",
         type=positive_int)
    _add(data, "--synthetic_test_rows", [("data", "synthetic_test_rows")], "synthetic test rows",
         type=positive_int)
    _add(data, "--synthetic_seed", [("data", "synthetic_seed")], "seed of the synthetic generator", type=seed)
    _add(data, "--train_mapping", [("data", "train_mapping")], "mapping (split) used for training")
    _add(data, "--test_mapping", [("data", "test_mapping")], "mapping (split) used for evaluation")
    _add(data, "--global_batch_size", [("data", "global_batch_size")], "training batch over all ranks",
         type=positive_int)
    _add(data, "--valid_batch_size", [("data", "eval_batch_size")], "evaluation batch over all ranks",
         type=positive_int)
    _add(data, "--partial_batch", [("data", "partial_batch")], "last smaller batch of an epoch",
         choices=["keep", "drop"])
    _add(data, "--prefetch_batches", [("data", "prefetch_batches")], "batches read ahead", type=count)
    _add(data, "--decode_threads", [("data", "decode_threads")], "decode threads (whole batches each when prefetching)",
         type=positive_int)
    _add(data, "--skip_data_validation", [("data", "skip_data_validation")],
         "skip the start-up check of every id, numerical and label (for data validated already)",
         action="store_true")


def _model_flags(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("model")
    _add(model, "--arch", [("model", "arch")], "model: DLRM (dot interaction) or DCNv2 (cross layers)",
         choices=ARCHS)
    _add(model, "--embedding_dim", [("model", "embedding_dim")],
         "embedding vector size of the tables whose feature spec entry sets none", type=positive_int)
    _add(model, "--combiner", [("model", "combiner")],
         "pooling of a multi-hot feature's ids, for features whose spec entry sets none", choices=list(COMBINERS))
    _add(model, "--bottom_mlp_dims", [("model", "bottom_mlp")], "bottom MLP layer sizes, e.g. 512-256-128",
         type=layer_sizes)
    _add(model, "--top_mlp_dims", [("model", "top_mlp")], "top MLP layer sizes, last one 1", type=layer_sizes)
    _add(model, "--dcn_num_layers", [("model", "num_cross_layers")], "DCNv2 cross layers", type=positive_int)
    _add(model, "--dcn_low_rank_dim", [("model", "cross_projection_dim")], "DCNv2 low-rank projection size",
         type=positive_int)


def _optimizer_flags(parser: argparse.ArgumentParser) -> None:
    optim = parser.add_argument_group("optimizer and learning-rate schedule")
    _add(optim, "--optimizer", [("optimizer", "optimizer")], "optimizer (embeddings updated sparsely)",
         choices=list(OPTIMIZER_NAMES))
    _add(optim, "--learning_rate", [("optimizer", "learning_rate")], "peak learning rate", type=positive_number)
    _add(optim, "--warmup_steps", [("optimizer", "warmup_steps")], "linear warmup steps", type=count)
    _add(optim, "--decay_start_step", [("optimizer", "decay_start_step")], "first step of the polynomial decay",
         type=count)
    _add(optim, "--decay_steps", [("optimizer", "decay_steps")], "length of the decay (then clamped)",
         type=count)
    _add(optim, "--decay_power", [("optimizer", "decay_power")], "power of the polynomial decay", type=positive_number)
    _add(optim, "--end_learning_rate", [("optimizer", "end_learning_rate")], "learning rate after the decay",
         type=non_negative_number)


def _placement_flags(parser: argparse.ArgumentParser) -> None:
    shard = parser.add_argument_group("embedding placement and memory")
    _add(shard, "--sharding_strategy", [("sharding", "strategy")], "table placement strategy",
         choices=STRATEGIES)
    _add(shard, "--rank_memory", [("sharding", "rank_memory_bytes")],
         "embedding memory (weights + optimizer slots) per rank, one process included, e.g. 80GiB",
         type=positive_byte_size)
    _add(shard, "--column_slice_threshold", [("sharding", "column_slice_threshold_bytes")],
         "tables larger than this are split by columns, e.g. 2GiB", type=positive_byte_size)
    _add(shard, "--replicate_threshold", [("sharding", "replicate_threshold_bytes")],
         "tables up to this size are replicated on every rank, e.g. 1MiB", type=byte_size)


def _run_flags(parser: argparse.ArgumentParser) -> None:
    train = parser.add_argument_group("training run")
    _add(train, "--mode", [("train", "mode")], "what to run", choices=["train", "eval", "inference_benchmark"])
    _add(train, "--max_steps", [("train", "max_steps")], "stop after this many global steps", type=positive_int)
    _add(train, "--epochs", [("train", "epochs")], "passes over the training data (fractions allowed)",
         type=positive_number)
    _add(train, "--eval_every", [("train", "eval_every_steps")], "evaluate every N steps (and at the end)",
         type=positive_int)
    _add(train, "--log_every", [("train", "log_every_steps")], "log training metrics every N steps",
         type=positive_int)
    _add(train, "--run_dir", [("train", "run_dir")], "metrics.jsonl, TensorBoard, plot")
    _add(train, "--save_checkpoint_path", [("train", "save_checkpoint_path")],
         "checkpoint root; a run finding a checkpoint here resumes from it")
    _add(train, "--restore_checkpoint_path", [("train", "restore_checkpoint_path")],
         "checkpoint (root or step_* directory) to start from")
    _add(train, "--checkpoint_every", [("train", "checkpoint_every_steps")],
         "checkpoint every N steps (and at the end)", type=positive_int)
    _add(train, "--keep_checkpoints", [("train", "keep_checkpoints")], "complete checkpoints kept",
         type=positive_int)
    _add(train, "--amp", [("train", "amp")], "mixed precision (bfloat16 on CPU, float16 on GPU)",
         action="store_true")
    _add(train, "--xla", [("train", "xla")], "jit-compile the dense part", action="store_true")
    _add(train, "--seed", [("train", "seed"), ("model", "seed")], "seed for initialisation and data order",
         type=seed)
    _add(train, "--intra_op_threads", [("train", "intra_op_threads")], "TensorFlow intra-op threads per process",
         type=positive_int)
    _add(train, "--inter_op_threads", [("train", "inter_op_threads")], "TensorFlow inter-op threads per process",
         type=positive_int)
    _add(train, "--benchmark_warmup_steps", [("train", "benchmark_warmup_steps")],
         "inference_benchmark: untimed batches", type=count)
    _add(train, "--benchmark_steps", [("train", "benchmark_steps")], "inference_benchmark: timed batches",
         type=positive_int)
    _add(train, "--debug", [("train", "debug")], DEBUG_HELP, action="store_true")


def _set(config: Config, section: str, name: str, value) -> None:
    setattr(getattr(config, section), name, value)


def apply_demo_preset(config: Config) -> None:
    """Overwrite `config` with the embedded-demo values (used only when no dataset is given)."""
    for (section, name), value in DEMO_PRESET.items():
        _set(config, section, name, value)


def _validate(config: Config, parser: argparse.ArgumentParser) -> None:
    for problem in config.model.problems() + config.optimizer.problems():
        parser.error(problem)
    if config.train.mode == "eval" and not config.train.restore_checkpoint_path \
            and not config.train.save_checkpoint_path:
        parser.error("--mode eval needs --restore_checkpoint_path (or --save_checkpoint_path holding a checkpoint)")


def parse_config(argv: Optional[Sequence[str]] = None) -> Config:
    """Flags -> Config: reference defaults, then the demo preset if no dataset, then explicit flags."""
    parser = build_parser()
    given = vars(parser.parse_args(list(argv) if argv is not None else None))
    config = Config()
    if "dataset_path" not in given:
        apply_demo_preset(config)
    for dest, value in given.items():
        for section, name in _FLAG_FIELDS[dest]:
            _set(config, section, name, value)
    _validate(config, parser)
    return config
