"""One typed configuration for every part of the trainer.

Defaults are the reference DLRM (NVIDIA TF2 / MLPerf) configuration, except where a field says
otherwise. Flags are turned into a `Config` in exactly one place: `dlrm.cli.parse_config`.
Modules receive the section they need (e.g. `ModelConfig`), never the whole flag namespace.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterator, Mapping, Optional


@dataclass
class DataConfig:
    # None -> generate (or reuse) the embedded synthetic dataset under `synthetic_dir`.
    dataset_dir: Optional[str] = None
    synthetic_dir: str = "data/synthetic_tiny"
    synthetic_preset: str = "tiny"
    synthetic_train_rows: int = 1_048_576
    synthetic_test_rows: int = 131_072
    synthetic_seed: int = 12345
    train_mapping: str = "train"
    test_mapping: str = "test"
    global_batch_size: int = 65536
    eval_batch_size: int = 65536
    # What to do with a last batch smaller than the global batch: "keep" or "drop" (reported either way).
    partial_batch: str = "keep"
    prefetch_batches: int = 4
    # Decode threads (with prefetch, each decodes whole batches in the background; with prefetch 0, each
    # batch's rows are split between them on numba's threads): more than 1 pays off only
    # with a core to spare next to the training step (benchmarks/loader.py).
    decode_threads: int = 1
    # Skip the start-up check of every value (ids, numericals, labels) of the mappings a run reads.
    skip_data_validation: bool = False


ARCHS = ("dlrm", "dcnv2", "widedeep")
MODEL_TYPES = ("wide", "deep", "wide_n_deep")  # --arch widedeep: which parts the model keeps
MAX_CROSS_BUCKETS = 2**31 - 1  # cross ids are int32 (`dlrm.feature_crosses`)
DEEP_OPTIMIZERS = ("rmsprop", "adagrad")  # --arch widedeep: the deep part's optimizer (the wide part: FTRL)


def _sizes(dims) -> str:
    """Layer sizes as a user types them: 512-256-128."""
    return "-".join(str(d) for d in dims)


@dataclass
class ModelConfig:
    arch: str = "dlrm"  # "dlrm" (dot interaction), "dcnv2" (low-rank cross layers) or "widedeep"
    embedding_dim: int = 128  # the dim of every table whose feature spec entry sets none
    combiner: str = "sum"  # pooling of a multi-hot bag ("sum" or "mean") unless its spec entry sets one
    bottom_mlp: tuple[int, ...] = (512, 256, 128)
    top_mlp: tuple[int, ...] = (1024, 1024, 512, 256, 1)
    num_cross_layers: int = 3
    cross_projection_dim: int = 512
    # Wide & Deep (NVIDIA's TF2 defaults): the deep MLP's hidden layers (then one logit), dropout after each.
    deep_hidden_units: tuple[int, ...] = (1024, 1024, 1024, 1024, 1024)
    deep_dropout: float = 0.1
    model_type: str = "wide_n_deep"  # or "wide" / "deep": only that part
    # Wide & Deep: pairs of one-hot features crossed in the wide part (none: NVIDIA's TF2 reference), each a
    # table of min(card_A x card_B, wide_cross_buckets) rows (`dlrm.feature_crosses`).
    wide_crosses: tuple[tuple[str, str], ...] = ()
    wide_cross_buckets: int = 1 << 20
    seed: int = 0

    def problems(self) -> list[str]:
        """Why this model cannot be built whatever the data (empty if it can): checked by the CLI and by the
        model. The rules that depend on the dataset's features are in `dlrm.model.shape_rules`."""
        found = []
        if self.arch not in ARCHS:
            found.append(f"model arch must be one of {ARCHS}, got {self.arch!r}")
        if self.model_type not in MODEL_TYPES:
            found.append(f"model type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        if not 0.0 <= self.deep_dropout < 1.0:
            found.append(f"the deep dropout rate (--deep_dropout) must be in [0, 1), got {self.deep_dropout}")
        if self.wide_crosses and (self.arch != "widedeep" or self.model_type == "deep"):
            found.append("--wide_crosses are features of the Wide & Deep wide part: they need --arch widedeep and "
                         f"--model_type wide or wide_n_deep (got --arch {self.arch}"
                         + (f" --model_type {self.model_type})" if self.arch == "widedeep" else ")"))
        if not 1 <= self.wide_cross_buckets <= MAX_CROSS_BUCKETS:
            found.append(f"--wide_cross_buckets must be in [1, {MAX_CROSS_BUCKETS}] (int32 ids), "
                         f"got {self.wide_cross_buckets}")
        if tuple(self.top_mlp)[-1:] != (1,):
            found.append(f"the top MLP (--top_mlp_dims) must end in 1 unit (a logit), got {_sizes(self.top_mlp)}")
        return found


@dataclass
class OptimizerConfig:
    optimizer: str = "sgd"  # "sgd", "adagrad", "adam" (embeddings always updated sparsely)
    learning_rate: float = 24.0
    warmup_steps: int = 8000
    decay_start_step: int = 48000
    decay_steps: int = 24000
    decay_power: float = 2.0
    end_learning_rate: float = 0.0  # the decay is clamped here past its end
    # --arch widedeep (NVIDIA's TF2 defaults): FTRL on the wide part at a constant rate; the deep part's
    # optimizer with a warmup over `deep_warmup_epochs`, then 1/4, then 1/8 of its rate (schedule.py).
    linear_learning_rate: float = 0.02
    # FTRL's starting accumulator (Keras' default 0.1). The loss is a batch mean, so one id's gradient is
    # ~1/batch of a row's: against 0.1 its weight barely moves in a short run; a tiny value makes the
    # first updates scale-free (~ learning rate per step), which is what the embedded demo uses.
    linear_initial_accumulator: float = 0.1
    deep_learning_rate: float = 0.00012
    deep_warmup_epochs: float = 6.0
    deep_optimizer: str = "rmsprop"

    def problems(self) -> list[str]:
        """Why this schedule cannot run (empty if it can): checked by the CLI before anything starts."""
        if self.decay_steps > 0 and self.decay_start_step < self.warmup_steps:
            return [f"--decay_start_step ({self.decay_start_step}) must not come before the end of the warmup "
                    f"(--warmup_steps {self.warmup_steps}); set --decay_steps 0 to disable the decay"]
        return []


@dataclass
class ShardingConfig:
    """How embedding tables are placed on ranks (see dlrm.embedding.planner)."""

    strategy: str = "memory_balanced"  # or "basic" (round-robin)
    rank_memory_bytes: Optional[int] = None  # None -> no budget check
    column_slice_threshold_bytes: Optional[int] = None  # tables above are split by columns
    replicate_threshold_bytes: int = 0  # tables at or below are replicated (data-parallel)
    bytes_per_element: int = 4


@dataclass
class TrainConfig:
    mode: str = "train"  # "train", "eval", "inference_benchmark"
    max_steps: Optional[int] = None
    epochs: float = 1.0
    eval_every_steps: Optional[int] = None
    log_every_steps: int = 50
    run_dir: str = "runs/default"
    save_checkpoint_path: Optional[str] = None
    restore_checkpoint_path: Optional[str] = None
    checkpoint_every_steps: Optional[int] = None
    keep_checkpoints: int = 3  # older complete checkpoints are deleted
    amp: bool = False
    xla: bool = False
    seed: int = 0
    intra_op_threads: Optional[int] = None  # None -> CPU cores / processes on this node
    inter_op_threads: int = 1
    backend: str = "auto"  # process group: "auto", "horovod", "mpi" (dlrm.dist.launcher.choose_backend)
    exchange_ids_in_step: bool = False  # else the MPI backend sends a batch's ids during the step before
    # CSV of every evaluated row's group id, label, logit, probability (eval mode; train: the final evaluation)
    predictions_path: Optional[str] = None
    benchmark_warmup_steps: int = 5  # inference_benchmark: untimed batches, then timed ones
    benchmark_steps: int = 50
    saved_model_output_path: Optional[str] = None  # export for serving at the end of training (dlrm.export)
    benchmark: bool = False  # train mode: time benchmark_steps steps after benchmark_warmup_steps, then stop
    debug: bool = False  # tracebacks for errors caused by input or configuration too


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    sharding: ShardingConfig = field(default_factory=ShardingConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, saved: dict) -> "Config":
        """The configuration `to_dict` wrote (e.g. a checkpoint's meta.json): fields this version does not
        know are ignored, missing ones keep their defaults, lists become the tuples the fields hold."""
        config = cls()
        for section in dataclasses.fields(cls):
            target = getattr(config, section.name)
            for item in dataclasses.fields(target):
                if item.name in saved.get(section.name, {}):
                    setattr(target, item.name, _tuples(saved[section.name][item.name]))
        return config


@dataclass(frozen=True)
class PartialConfig:
    """Some fields of a `Config`, per section: what a preset, or the flags a user typed, change.

    Typed per section rather than keyed by loose (section, field) pairs: a field name that no section has
    is refused when the partial config is made, and `applied_to` returns a new `Config` (the one given
    is left as it was), so presets and flags stack in a stated order and can be shown in `--help`.
    """

    data: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    optimizer: Mapping[str, Any] = field(default_factory=dict)
    sharding: Mapping[str, Any] = field(default_factory=dict)
    train: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        defaults = Config()
        for section in dataclasses.fields(Config):
            values = dict(getattr(self, section.name))
            known = {item.name for item in dataclasses.fields(getattr(defaults, section.name))}
            if set(values) - known:
                raise TypeError(f"{section.name} has no field {sorted(set(values) - known)}")
            object.__setattr__(self, section.name, MappingProxyType(values))

    def get(self, section: str, name: str, default: Any = None) -> Any:
        return getattr(self, section).get(name, default)

    def items(self) -> Iterator[tuple[tuple[str, str], Any]]:
        """((section, field), value) of every field this partial config sets."""
        for section in dataclasses.fields(Config):
            for name, value in getattr(self, section.name).items():
                yield (section.name, name), value

    def applied_to(self, config: Config) -> Config:
        """A copy of `config` with these fields set."""
        return dataclasses.replace(config, **{
            section.name: dataclasses.replace(getattr(config, section.name), **getattr(self, section.name))
            for section in dataclasses.fields(Config)})


def _tuples(value):
    """JSON lists (nested too: the crossed pairs) back to the tuples the fields hold."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


@dataclass
class ExportConfig:
    """`python -m dlrm.export`: a checkpoint (any world size) -> a SavedModel for serving (docs/export.md)."""

    checkpoint: str = ""  # a checkpoint root (its latest complete checkpoint) or a step_* directory
    out: str = ""  # the SavedModel directory (written to a temporary name, then renamed)
    dataset_dir: Optional[str] = None  # the feature spec's directory; None -> the one the checkpoint names
    overwrite: bool = False  # replace an existing `out`
    max_memory_bytes: Optional[int] = None  # refuse models whose tables need more in one process
    onnx: bool = False  # also write `<out>/model.onnx`
    debug: bool = False
