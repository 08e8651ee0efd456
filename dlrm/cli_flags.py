"""The trainer's flags: one declared table of what each flag sets in the `Config`, read by `dlrm.cli`.

Flag names are NVIDIA's (TF2 DLRM and Wide & Deep scripts) where they have one, since users type them;
the field a flag sets is named beside it, so `--dataset_path` -> `data.dataset_dir` is stated, not
inferred. The table is immutable: building a parser reads it and changes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

from dlrm.argtypes import (
    DEBUG_HELP,
    count,
    dropout_rate,
    feature_pairs,
    layer_sizes,
    non_negative_number,
    positive_int,
    positive_number,
    seed,
)
from dlrm.config import ARCHS, DEEP_OPTIMIZERS, MODEL_TYPES
from dlrm.data.synthetic.presets import SYNTHETIC_PRESET_NAMES
from dlrm.embedding.optimizer_slots import OPTIMIZER_NAMES
from dlrm.embedding.planner import STRATEGIES
from dlrm.features import COMBINERS
from dlrm.sizes import SIZE_UNITS, byte_size, positive_byte_size

FieldPath = tuple[str, str]  # (section, field) of a `Config`, e.g. ("data", "dataset_dir")

# The archs a flag applies to, where it does not apply to all of them.
MLP_ARCHS = ("dlrm", "dcnv2")  # bottom and top MLP, one optimizer with the reference schedule
DCN = ("dcnv2",)
WIDEDEEP = ("widedeep",)
DEEP_PART = ("deep", "wide_n_deep")  # the --model_type values that keep the deep part
WIDE_PART = ("wide", "wide_n_deep")
# The runs a flag applies to, where it does not apply to all of them: the values of --mode, with train mode's
# --benchmark a run of its own (timed training steps: no evaluation, no checkpoint read or written).
BENCHMARK = "train --benchmark"
STEPS = ("train", BENCHMARK)  # what a training step reads: its data, batch, optimizer and schedule
TRAINING = ("train",)  # the training loop's own: its length, evaluations, log lines and checkpoints
NOT_BENCHMARK = ("train", "eval", "inference_benchmark")  # the test data, and checkpoints read or written
EVALUATING = ("train", "eval")  # the evaluation's results (train mode: the final evaluation)
TIMED = (BENCHMARK, "inference_benchmark")


@dataclass(frozen=True)
class Flag:
    """One flag: its name as typed, the `Config` field(s) its value goes to, and how argparse reads it."""

    name: str  # "--dataset_path"
    field: str  # "data.dataset_dir"
    help: str  # without the default, which the parser adds from the `Config` and the presets
    type: Optional[Callable[[str], object]] = None  # None: the text itself
    choices: Optional[tuple] = None
    several: bool = False  # takes one or more values (nargs="+"), stored as a tuple
    switch: bool = False  # takes no value: True when given
    const: object = None  # takes no value: sets this one (`--evaluate` is `--mode eval`)
    also: tuple[str, ...] = ()  # further fields that take the same value (`--seed`)
    # The archs, Wide & Deep model types and modes where the flag does something; typed anywhere else it is
    # refused (`dlrm.cli`). Empty: all of them.
    archs: tuple[str, ...] = ()
    model_types: tuple[str, ...] = ()  # of --arch widedeep
    modes: tuple[str, ...] = ()  # runs: values of --mode, and BENCHMARK
    needs: str = ""  # a flag that must be given too for this one to do anything
    # Under --benchmark only a schedule laid out over the epochs reads it (Wide & Deep's deep part): the
    # benchmark's length is its own steps.
    benchmark_schedule_only: bool = False

    @property
    def dest(self) -> str:
        return self.name.lstrip("-")

    @property
    def fields(self) -> tuple[FieldPath, ...]:
        """Every (section, field) this flag sets, the one its default is shown from first."""
        return tuple((path.split(".")[0], path.split(".")[1]) for path in (self.field, *self.also))


@dataclass(frozen=True)
class FlagGroup:
    title: str
    flags: tuple[Flag, ...]


DATA_FLAGS = FlagGroup("data", (
    Flag("--dataset_path", "data.dataset_dir", "split-binary dataset directory (feature_spec.yaml)"),
    Flag("--synthetic_dir", "data.synthetic_dir", "where the embedded synthetic dataset lives"),
    Flag("--synthetic_preset", "data.synthetic_preset", "table-size preset of the synthetic dataset",
         choices=SYNTHETIC_PRESET_NAMES),
    Flag("--synthetic_train_rows", "data.synthetic_train_rows", "synthetic training rows", type=positive_int),
    Flag("--synthetic_test_rows", "data.synthetic_test_rows", "synthetic test rows", type=positive_int),
    Flag("--synthetic_seed", "data.synthetic_seed", "seed of the synthetic generator", type=seed),
    Flag("--train_mapping", "data.train_mapping", "mapping (split) used for training", modes=STEPS),
    Flag("--test_mapping", "data.test_mapping", "mapping (split) used for evaluation",
         modes=NOT_BENCHMARK),
    Flag("--global_batch_size", "data.global_batch_size", "training batch over all ranks",
         type=positive_int, modes=STEPS),
    Flag("--valid_batch_size", "data.eval_batch_size", "evaluation batch over all ranks", type=positive_int,
         modes=NOT_BENCHMARK),
    Flag("--eval_batch_size", "data.eval_batch_size", "the same as --valid_batch_size", type=positive_int,
         modes=NOT_BENCHMARK),
    Flag("--partial_batch", "data.partial_batch", "last smaller batch of an epoch",
         choices=("keep", "drop"), modes=STEPS),
    Flag("--prefetch_batches", "data.prefetch_batches", "batches read ahead", type=count),
    Flag("--decode_threads", "data.decode_threads", "decode threads (whole batches each when prefetching)",
         type=positive_int),
    Flag("--skip_data_validation", "data.skip_data_validation",
         "skip the start-up check of every id, numerical and label (for data validated already)", switch=True),
))

MODEL_FLAGS = FlagGroup("model", (
    Flag("--arch", "model.arch", "model: DLRM (dot interaction), DCNv2 (cross layers) or Wide & Deep",
         choices=ARCHS),
    Flag("--embedding_dim", "model.embedding_dim",
         "embedding vector size of the tables whose feature spec entry sets none", type=positive_int),
    Flag("--combiner", "model.combiner",
         "pooling of a multi-hot feature's ids, for features whose spec entry sets none", choices=tuple(COMBINERS)),
    Flag("--bottom_mlp_dims", "model.bottom_mlp", "bottom MLP layer sizes, e.g. 512-256-128", type=layer_sizes,
         archs=MLP_ARCHS),
    Flag("--top_mlp_dims", "model.top_mlp", "top MLP layer sizes, last one 1", type=layer_sizes, archs=MLP_ARCHS),
    Flag("--dcn_num_layers", "model.num_cross_layers", "DCNv2 cross layers", type=positive_int, archs=DCN),
    Flag("--dcn_low_rank_dim", "model.cross_projection_dim", "DCNv2 low-rank projection size", type=positive_int,
         archs=DCN),
    Flag("--deep_hidden_units", "model.deep_hidden_units",
         "Wide & Deep: hidden layer sizes of the deep part, e.g. 1024 1024 1024", type=positive_int, several=True,
         archs=WIDEDEEP, model_types=DEEP_PART),
    Flag("--deep_dropout", "model.deep_dropout", "Wide & Deep: dropout after each deep hidden layer",
         type=dropout_rate, archs=WIDEDEEP, model_types=DEEP_PART),
    Flag("--model_type", "model.model_type", "Wide & Deep: the parts the model keeps", choices=MODEL_TYPES,
         archs=WIDEDEEP),
    Flag("--wide_crosses", "model.wide_crosses",
         "Wide & Deep: pairs of one-hot features crossed in the wide part, e.g. advertiser_id:geo_location_state,"
         "campaign_id:publisher_id (one weight per pair of ids)", type=feature_pairs,
         archs=WIDEDEEP, model_types=WIDE_PART),
    Flag("--wide_cross_buckets", "model.wide_cross_buckets",
         "Wide & Deep: rows of a cross table whose pairs do not fit (then ids are hashed)", type=positive_int,
         archs=WIDEDEEP, model_types=WIDE_PART),
))

OPTIMIZER_FLAGS = FlagGroup("optimizer and learning-rate schedule", (
    Flag("--optimizer", "optimizer.optimizer", "optimizer (embeddings updated sparsely)",
         choices=tuple(OPTIMIZER_NAMES), archs=MLP_ARCHS, modes=STEPS),
    Flag("--learning_rate", "optimizer.learning_rate", "peak learning rate",
         type=positive_number, archs=MLP_ARCHS, modes=STEPS),
    Flag("--warmup_steps", "optimizer.warmup_steps", "linear warmup steps",
         type=count, archs=MLP_ARCHS, modes=STEPS),
    Flag("--decay_start_step", "optimizer.decay_start_step", "first step of the polynomial decay", type=count,
         archs=MLP_ARCHS, modes=STEPS),
    Flag("--decay_steps", "optimizer.decay_steps", "length of the decay (then clamped)",
         type=count, archs=MLP_ARCHS, modes=STEPS),
    Flag("--decay_power", "optimizer.decay_power", "power of the polynomial decay", type=positive_number,
         archs=MLP_ARCHS, modes=STEPS),
    Flag("--end_learning_rate", "optimizer.end_learning_rate", "learning rate after the decay",
         type=non_negative_number, archs=MLP_ARCHS, modes=STEPS),
    Flag("--linear_learning_rate", "optimizer.linear_learning_rate",
         "Wide & Deep: FTRL learning rate of the wide part (constant)", type=positive_number,
         archs=WIDEDEEP, model_types=WIDE_PART, modes=STEPS),
    Flag("--linear_initial_accumulator", "optimizer.linear_initial_accumulator",
         "Wide & Deep: FTRL's starting accumulator (small: the wide part learns from the first steps on)",
         type=positive_number, archs=WIDEDEEP, model_types=WIDE_PART, modes=STEPS),
    Flag("--deep_learning_rate", "optimizer.deep_learning_rate", "Wide & Deep: peak learning rate of the deep part",
         type=positive_number, archs=WIDEDEEP, model_types=DEEP_PART, modes=STEPS),
    Flag("--deep_warmup_epochs", "optimizer.deep_warmup_epochs",
         "Wide & Deep: epochs of linear warmup of the deep part's learning rate", type=non_negative_number,
         archs=WIDEDEEP, model_types=DEEP_PART, modes=STEPS),
    Flag("--deep_optimizer", "optimizer.deep_optimizer", "Wide & Deep: optimizer of the deep part",
         choices=DEEP_OPTIMIZERS, archs=WIDEDEEP, model_types=DEEP_PART, modes=STEPS),
))

PLACEMENT_FLAGS = FlagGroup("embedding placement and memory", (
    Flag("--sharding_strategy", "sharding.strategy", "table placement strategy", choices=tuple(STRATEGIES)),
    Flag("--rank_memory", "sharding.rank_memory_bytes",
         f"embedding memory (weights + optimizer slots) per rank, one process included, e.g. 80GiB; {SIZE_UNITS}",
         type=positive_byte_size),
    Flag("--column_slice_threshold", "sharding.column_slice_threshold_bytes",
         f"tables larger than this are split by columns, e.g. 2GiB; {SIZE_UNITS}", type=positive_byte_size),
    Flag("--replicate_threshold", "sharding.replicate_threshold_bytes",
         f"tables up to this size are replicated on every rank, e.g. 1MiB; {SIZE_UNITS}", type=byte_size),
))

RUN_FLAGS = FlagGroup("training run", (
    Flag("--mode", "train.mode", "what to run", choices=("train", "eval", "inference_benchmark")),
    Flag("--evaluate", "train.mode", "the same as --mode eval", const="eval"),
    Flag("--max_steps", "train.max_steps", "stop after this many global steps", type=positive_int, modes=TRAINING),
    Flag("--epochs", "train.epochs", "passes over the training data (fractions allowed)",
         type=positive_number, modes=STEPS, benchmark_schedule_only=True),
    Flag("--num_epochs", "train.epochs", "the same as --epochs", type=positive_number, modes=STEPS,
         benchmark_schedule_only=True),
    Flag("--eval_every", "train.eval_every_steps", "evaluate every N steps (and at the end)",
         type=positive_int, modes=TRAINING),
    Flag("--log_every", "train.log_every_steps", "log training metrics every N steps",
         type=positive_int, modes=TRAINING),
    Flag("--run_dir", "train.run_dir", "metrics.jsonl, TensorBoard, plot"),
    Flag("--save_checkpoint_path", "train.save_checkpoint_path",
         "checkpoint root; a run finding a checkpoint here resumes from it", modes=NOT_BENCHMARK),
    Flag("--restore_checkpoint_path", "train.restore_checkpoint_path",
         "checkpoint (root or step_* directory) to start from", modes=NOT_BENCHMARK),
    Flag("--checkpoint_every", "train.checkpoint_every_steps", "checkpoint every N steps (and at the end)",
         type=positive_int, modes=TRAINING, needs="--save_checkpoint_path"),
    Flag("--keep_checkpoints", "train.keep_checkpoints", "complete checkpoints kept",
         type=positive_int, modes=TRAINING, needs="--save_checkpoint_path"),
    Flag("--saved_model_output_path", "train.saved_model_output_path",
         "at the end of training, export the final checkpoint as a SavedModel here (python -m dlrm.export)",
         modes=TRAINING, needs="--save_checkpoint_path"),
    Flag("--amp", "train.amp", "mixed precision (bfloat16 on CPU, float16 on GPU)", switch=True),
    Flag("--xla", "train.xla", "jit-compile the dense part", switch=True),
    Flag("--seed", "train.seed", "seed for initialisation and data order", type=seed, also=("model.seed",)),
    Flag("--intra_op_threads", "train.intra_op_threads", "TensorFlow intra-op threads per process",
         type=positive_int),
    Flag("--inter_op_threads", "train.inter_op_threads", "TensorFlow inter-op threads per process",
         type=positive_int),
    Flag("--backend", "train.backend", "collectives: horovod (horovodrun), mpi (mpi4py under mpirun or srun); "
         "auto: horovod if HOROVOD_* is set or one process, else mpi", choices=("auto", "horovod", "mpi")),
    Flag("--exchange_ids_in_step", "train.exchange_ids_in_step",
         "send each batch's ids to the ranks owning their tables inside its training step; by default the MPI "
         "backend sends them during the step before", switch=True, modes=TRAINING),
    Flag("--predictions_path", "train.predictions_path",
         "write every evaluated row's group_id,label,logit,probability to this CSV file (eval mode; train mode: "
         "the final evaluation)", modes=EVALUATING),
    Flag("--benchmark", "train.benchmark",
         "train mode: time --benchmark_steps training steps after --benchmark_warmup_steps, report samples/s, "
         "stop (no checkpoint, no evaluation)", switch=True),
    Flag("--benchmark_warmup_steps", "train.benchmark_warmup_steps",
         "inference_benchmark and --benchmark: untimed batches", type=count, modes=TIMED),
    Flag("--benchmark_steps", "train.benchmark_steps", "inference_benchmark and --benchmark: timed batches",
         type=positive_int, modes=TIMED),
    Flag("--debug", "train.debug", DEBUG_HELP, switch=True),
))

FLAG_GROUPS: tuple[FlagGroup, ...] = (DATA_FLAGS, MODEL_FLAGS, OPTIMIZER_FLAGS, PLACEMENT_FLAGS, RUN_FLAGS)

FLAGS_BY_NAME = {flag.name: flag for group in FLAG_GROUPS for flag in group.flags}


def run_name(mode: str, benchmark: bool) -> str:
    """The run of a --mode and --benchmark, as the flag table's `modes` name them."""
    return BENCHMARK if mode == "train" and benchmark else mode


def not_applying(flag: Flag, arch: str, model_type: str, mode: str) -> Optional[str]:
    """Why `flag` would change nothing for this arch, Wide & Deep model type and run (`run_name`; None: it
    applies), as the trainer's and the planner's command lines say it."""
    if flag.archs and arch not in flag.archs:
        return f"not used by --arch {arch} (it applies to --arch {' and '.join(flag.archs)})"
    if flag.model_types and model_type not in flag.model_types:
        return f"not used by --model_type {model_type} (it applies to --model_type {' and '.join(flag.model_types)})"
    if flag.modes and mode not in flag.modes:
        return f"not used by --mode {mode} (it applies to {' and '.join(f'--mode {run}' for run in flag.modes)})"
    if flag.benchmark_schedule_only and mode == BENCHMARK and not (arch in WIDEDEEP and model_type in DEEP_PART):
        return (f"not used by --benchmark with --arch {arch}{' --model_type wide' if arch in WIDEDEEP else ''} "
                f"(its length is --benchmark_steps; under --benchmark only the deep part of --arch widedeep "
                f"lays out its learning-rate schedule over the epochs)")
    return None
