"""Command-line flags -> `Config`: the only place where flags become configuration.

Flag names follow NVIDIA's TF2 DLRM scripts where they have one (`--dataset_path`,
`--global_batch_size`, `--bottom_mlp_dims`, ...). Defaults are the reference configuration
(`dlrm.config`). `--arch widedeep` takes NVIDIA's Wide & Deep defaults (`WIDEDEEP_PRESET`; flag names
from NVIDIA's W&D scripts where they have one: `--num_epochs`, `--deep_hidden_units`, ...). Without
`--dataset_path` the run uses the embedded synthetic dataset and the `DEMO_PRESET` (DLRM, DCNv2) or
`WIDEDEEP_DEMO_PRESET` below is applied first, so that `python main.py` finishes in a few minutes on a
laptop; flags given explicitly always win over the presets.

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
    dropout_rate,
    feature_pairs,
    layer_sizes,
    non_negative_number,
    positive_int,
    positive_number,
    seed,
    show_default,
)
from dlrm.config import ARCHS, DEEP_OPTIMIZERS, MODEL_TYPES, Config
from dlrm.data.presets import SYNTHETIC_PRESET_NAMES
from dlrm.data.synthetic_widedeep_model import PAIR_FEATURES
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES
from dlrm.embedding.planner import STRATEGIES
from dlrm.features import COMBINERS
from dlrm.sizes import SIZE_UNITS, byte_size, positive_byte_size

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

# --arch widedeep: NVIDIA's TF2 Wide & Deep defaults where they differ from the DLRM ones.
WIDEDEEP_PRESET: dict[tuple[str, str], object] = {
    ("data", "global_batch_size"): 131072,
    ("data", "eval_batch_size"): 131072,
    ("train", "epochs"): 20.0,
    ("train", "log_every_steps"): 100,
    ("train", "benchmark_warmup_steps"): 500,
    ("train", "benchmark_steps"): 1000,
}

# --arch widedeep without --dataset_path: the Outbrain-shaped synthetic click log (`widedeep_tiny`, 2.4M
# rows: ~1.6M train, ~800k test) and a model and schedule for a few minutes on 2 CPU cores. FTRL starts
# from a tiny accumulator: under the batch-mean loss Keras' 0.1 leaves the wide part nearly still in so
# short a run. The wide part crosses the generator's pair features (`PAIR_FEATURES`: its per-pair effects,
# which only a crossed feature learns in this budget; a deep-only model drops them). Measured in docs/data.md.
WIDEDEEP_DEMO_PRESET: dict[tuple[str, str], object] = {
    ("data", "synthetic_preset"): "widedeep_tiny",
    ("data", "synthetic_dir"): "data/synthetic_widedeep_tiny",
    ("data", "synthetic_train_rows"): 1_600_000,
    ("data", "synthetic_test_rows"): 800_000,
    ("data", "global_batch_size"): 4096,
    ("data", "eval_batch_size"): 16384,
    ("model", "deep_hidden_units"): (256, 256, 256),
    ("model", "wide_crosses"): PAIR_FEATURES,  # the generator's pair signal
    ("optimizer", "linear_learning_rate"): 0.3,
    ("optimizer", "linear_initial_accumulator"): 1e-6,
    ("optimizer", "deep_learning_rate"): 0.002,
    ("optimizer", "deep_warmup_epochs"): 0.1,
    ("train", "epochs"): 2.5,
    ("train", "eval_every_steps"): 1000,
    ("train", "log_every_steps"): 50,
    ("train", "run_dir"): "runs/widedeep_demo",
}


# flag dest -> the (section, field) pairs it sets. One row per flag; no **kwargs splatting.
_FLAG_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {}


def _add(group, flag: str, targets: Sequence[tuple[str, str]], help: str,
         type: Optional[Callable] = None, choices=None, action: Optional[str] = None, nargs: Optional[str] = None,
         const: object = None) -> None:
    dest = flag.lstrip("-")
    defaults = Config()
    section, name = targets[0]
    shown = getattr(getattr(defaults, section), name)
    presets = [(label, preset[(section, name)]) for label, preset in
               (("demo", DEMO_PRESET), ("widedeep", WIDEDEEP_PRESET), ("widedeep demo", WIDEDEEP_DEMO_PRESET))
               if (section, name) in preset]
    separator = " " if nargs else "-"
    suffix = f" (default: {show_default(shown, separator)}" + "".join(
        f"; {label}: {show_default(value, separator)}" for label, value in presets) + ")"
    kwargs: dict[str, object] = {"dest": dest, "help": help + suffix}
    if const is not None:
        kwargs.update(action="store_const", const=const)
    elif action:
        kwargs["action"] = action
    else:
        if nargs:
            kwargs["nargs"] = nargs
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
    _add(data, "--eval_batch_size", [("data", "eval_batch_size")], "the same as --valid_batch_size",
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
    _add(model, "--arch", [("model", "arch")],
         "model: DLRM (dot interaction), DCNv2 (cross layers) or Wide & Deep", choices=ARCHS)
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
    _add(model, "--deep_hidden_units", [("model", "deep_hidden_units")],
         "Wide & Deep: hidden layer sizes of the deep part, e.g. 1024 1024 1024", type=positive_int, nargs="+")
    _add(model, "--deep_dropout", [("model", "deep_dropout")], "Wide & Deep: dropout after each deep hidden layer",
         type=dropout_rate)
    _add(model, "--model_type", [("model", "model_type")], "Wide & Deep: the parts the model keeps",
         choices=list(MODEL_TYPES))
    _add(model, "--wide_crosses", [("model", "wide_crosses")],
         "Wide & Deep: pairs of one-hot features crossed in the wide part, e.g. advertiser_id:geo_location_state,"
         "campaign_id:publisher_id (one weight per pair of ids)", type=feature_pairs)
    _add(model, "--wide_cross_buckets", [("model", "wide_cross_buckets")],
         "Wide & Deep: rows of a cross table whose pairs do not fit (then ids are hashed)", type=positive_int)


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
    _add(optim, "--linear_learning_rate", [("optimizer", "linear_learning_rate")],
         "Wide & Deep: FTRL learning rate of the wide part (constant)", type=positive_number)
    _add(optim, "--linear_initial_accumulator", [("optimizer", "linear_initial_accumulator")],
         "Wide & Deep: FTRL's starting accumulator (small: the wide part learns from the first steps on)",
         type=positive_number)
    _add(optim, "--deep_learning_rate", [("optimizer", "deep_learning_rate")],
         "Wide & Deep: peak learning rate of the deep part", type=positive_number)
    _add(optim, "--deep_warmup_epochs", [("optimizer", "deep_warmup_epochs")],
         "Wide & Deep: epochs of linear warmup of the deep part's learning rate", type=non_negative_number)
    _add(optim, "--deep_optimizer", [("optimizer", "deep_optimizer")], "Wide & Deep: optimizer of the deep part",
         choices=list(DEEP_OPTIMIZERS))


def _placement_flags(parser: argparse.ArgumentParser) -> None:
    shard = parser.add_argument_group("embedding placement and memory")
    _add(shard, "--sharding_strategy", [("sharding", "strategy")], "table placement strategy",
         choices=STRATEGIES)
    _add(shard, "--rank_memory", [("sharding", "rank_memory_bytes")],
         f"embedding memory (weights + optimizer slots) per rank, one process included, e.g. 80GiB; {SIZE_UNITS}",
         type=positive_byte_size)
    _add(shard, "--column_slice_threshold", [("sharding", "column_slice_threshold_bytes")],
         f"tables larger than this are split by columns, e.g. 2GiB; {SIZE_UNITS}", type=positive_byte_size)
    _add(shard, "--replicate_threshold", [("sharding", "replicate_threshold_bytes")],
         f"tables up to this size are replicated on every rank, e.g. 1MiB; {SIZE_UNITS}", type=byte_size)


def _run_flags(parser: argparse.ArgumentParser) -> None:
    train = parser.add_argument_group("training run")
    _add(train, "--mode", [("train", "mode")], "what to run", choices=["train", "eval", "inference_benchmark"])
    _add(train, "--evaluate", [("train", "mode")], "the same as --mode eval", const="eval")
    _add(train, "--max_steps", [("train", "max_steps")], "stop after this many global steps", type=positive_int)
    _add(train, "--epochs", [("train", "epochs")], "passes over the training data (fractions allowed)",
         type=positive_number)
    _add(train, "--num_epochs", [("train", "epochs")], "the same as --epochs", type=positive_number)
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
    _add(train, "--saved_model_output_path", [("train", "saved_model_output_path")],
         "at the end of training, export the final checkpoint as a SavedModel here (python -m dlrm.export)")
    _add(train, "--amp", [("train", "amp")], "mixed precision (bfloat16 on CPU, float16 on GPU)",
         action="store_true")
    _add(train, "--xla", [("train", "xla")], "jit-compile the dense part", action="store_true")
    _add(train, "--seed", [("train", "seed"), ("model", "seed")], "seed for initialisation and data order",
         type=seed)
    _add(train, "--intra_op_threads", [("train", "intra_op_threads")], "TensorFlow intra-op threads per process",
         type=positive_int)
    _add(train, "--inter_op_threads", [("train", "inter_op_threads")], "TensorFlow inter-op threads per process",
         type=positive_int)
    _add(train, "--predictions_path", [("train", "predictions_path")],
         "write every evaluated row's group_id,label,logit,probability to this CSV file (eval mode; train mode: "
         "the final evaluation)")
    _add(train, "--benchmark", [("train", "benchmark")],
         "train mode: time --benchmark_steps training steps after --benchmark_warmup_steps, report samples/s, "
         "stop (no checkpoint, no evaluation)", action="store_true")
    _add(train, "--benchmark_warmup_steps", [("train", "benchmark_warmup_steps")],
         "inference_benchmark and --benchmark: untimed batches", type=count)
    _add(train, "--benchmark_steps", [("train", "benchmark_steps")],
         "inference_benchmark and --benchmark: timed batches", type=positive_int)
    _add(train, "--debug", [("train", "debug")], DEBUG_HELP, action="store_true")


def _set(config: Config, section: str, name: str, value) -> None:
    setattr(getattr(config, section), name, value)


def apply_preset(config: Config, preset: dict[tuple[str, str], object]) -> None:
    for (section, name), value in preset.items():
        _set(config, section, name, value)


def apply_demo_preset(config: Config) -> None:
    """Overwrite `config` with the embedded-demo values (used only when no dataset is given)."""
    apply_preset(config, DEMO_PRESET)


def _validate(config: Config, parser: argparse.ArgumentParser) -> None:
    for problem in config.model.problems() + config.optimizer.problems():
        parser.error(problem)
    model, optim, train = config.model, config.optimizer, config.train
    if model.arch == "widedeep" and optim.deep_warmup_epochs > train.epochs:
        parser.error(f"--deep_warmup_epochs ({optim.deep_warmup_epochs:g}) must not exceed --num_epochs "
                     f"({train.epochs:g}): the deep learning-rate schedule is laid out over the epochs")
    if train.benchmark and train.mode != "train":
        parser.error(f"--benchmark times training steps; it cannot be combined with --mode {train.mode}")
    if config.train.mode == "eval" and not config.train.restore_checkpoint_path \
            and not config.train.save_checkpoint_path:
        parser.error("--mode eval needs --restore_checkpoint_path (or --save_checkpoint_path holding a checkpoint)")
    if config.train.saved_model_output_path and (config.train.mode != "train" or not config.train.save_checkpoint_path):
        parser.error("--saved_model_output_path exports the final checkpoint of a training run: it needs --mode train "
                     "and --save_checkpoint_path (or run python -m dlrm.export on a checkpoint)")
    if config.train.mode == "inference_benchmark" and config.train.predictions_path:
        parser.error("--predictions_path needs --mode eval or train (inference_benchmark does not evaluate)")


def parse_config(argv: Optional[Sequence[str]] = None) -> Config:
    """Flags -> Config: reference defaults, then the demo preset if no dataset, then explicit flags."""
    parser = build_parser()
    given = vars(parser.parse_args(list(argv) if argv is not None else None))
    config = Config()
    widedeep = given.get("arch") == "widedeep"
    if widedeep:
        apply_preset(config, WIDEDEEP_PRESET)
    if "dataset_path" not in given:
        apply_preset(config, WIDEDEEP_DEMO_PRESET if widedeep else DEMO_PRESET)
    for dest, value in given.items():
        for section, name in _FLAG_FIELDS[dest]:
            _set(config, section, name, tuple(value) if isinstance(value, list) else value)
    if "wide_crosses" not in given and config.model.model_type == "deep":
        config.model.wide_crosses = ()  # the demo's crosses belong to the wide part; a deep-only model has none
    _validate(config, parser)
    return config
