"""The build step: TensorFlow set-up, the embedding layer for this world size, and the `Parts` of a run.

The rank-dependent pieces are made here from the run's process group: the embedding layer (one
process: `LocalEmbedding`; several: the planner's hybrid-parallel placement) and the reader's per-rank
slice of each batch (`make_reader`).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple, Union

import tensorflow as tf

from dlrm import dist
from dlrm.config import Config, TrainConfig
from dlrm.data.format.contract import contract_from_spec
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader.reader import BatchReader
from dlrm.embedding.base import EmbeddingCollection
from dlrm.embedding.distributed import DistributedEmbedding
from dlrm.embedding.local import LocalEmbedding
from dlrm.embedding.memory_check import check_plan_fits_machine
from dlrm.embedding.optimizer_slots import slots_for_optimizer
from dlrm.embedding.planner import Plan, plan_embeddings
from dlrm.features import FeatureContract
from dlrm.keras2 import keras
from dlrm.model.build import Model, build_model
from dlrm.model.shape_rules import check_model_shape
from dlrm.model.widedeep import WideDeepModel
from dlrm.model_tables import has_deep, has_wide, model_tables
from dlrm.train import checkpoint
from dlrm.train.checkpoint import PieceSlots
from dlrm.train.optimizers import (
    LossScaledOptimizer,
    OptimizerGroup,
    SparseOptimizer,
    build_optimizer,
    build_widedeep_optimizer,
)
from dlrm.train.schedule import ConstantSchedule, ReferenceSchedule, WideDeepSchedule

Optimizer = Union[SparseOptimizer, OptimizerGroup, LossScaledOptimizer]


def optimizer_names(config: Config) -> Tuple[str, ...]:
    """The optimizers of a run: `--optimizer`, or Wide & Deep's FTRL and its deep optimizer."""
    if config.model.arch == "widedeep":
        return ("ftrl", config.optimizer.deep_optimizer)
    return (config.optimizer.optimizer,)


def optimizer_label(config: Config) -> str:
    """The run's optimizer(s) as checkpoints record them ("adam", "ftrl+rmsprop")."""
    return "+".join(optimizer_names(config))


def embedding_slot_count(config: Config) -> int:
    """Optimizer slots per embedding weight for the planner: the most any of the run's optimizers keeps."""
    return max(slots_for_optimizer(name) for name in optimizer_names(config))


def configure_tensorflow(train_cfg: TrainConfig) -> None:
    """Seeds, deterministic kernels and explicit thread counts: a rerun computes the same bits. Also one GPU
    per rank. Call it before TensorFlow's first op (thread pools and devices are fixed by then)."""
    intra = train_cfg.intra_op_threads or dist.cores_per_rank()
    try:
        dist.pin_gpu_to_local_rank(dist.launcher_world().local_rank)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(train_cfg.inter_op_threads)
    except RuntimeError:
        # TensorFlow already started in this process (several runs in one test process): keep its
        # devices and thread pools; they were set by the first run.
        pass
    tf.config.experimental.enable_op_determinism()
    keras.utils.set_random_seed(train_cfg.seed)


def _tables(config: Config, contract: FeatureContract, restored: bool):
    """The model's tables; `restored`: starting as zeros (a checkpoint overwrites every one next)."""
    tables = model_tables(config.model, contract)
    if restored:
        tables = tuple(replace(table, initializer="zeros") for table in tables)
    return tables


def build_embeddings(config: Config, contract: FeatureContract, group: dist.ProcessGroup,
                     restored: bool = False) -> Tuple[EmbeddingCollection, Optional[Plan]]:
    """LocalEmbedding for one process; the planner's hybrid-parallel placement for several (with its plan).

    The plan is made (and checked against --rank_memory and this machine's memory) for one process too,
    before anything is allocated. `restored`: a checkpoint is about to overwrite every table, so the tables
    start as zeros instead of drawing initial values (minutes for the biggest models)."""
    tables = _tables(config, contract, restored)
    plan = plan_embeddings(tables, group.size, config.sharding,
                           optimizer_slots=embedding_slot_count(config)
                           if config.train.mode == "train" else 0)  # eval and inference hold no slots
    check_plan_fits_machine(plan, group)
    if group.size == 1:
        return LocalEmbedding(tables, seed=config.model.seed), None
    return DistributedEmbedding(tables, plan, seed=config.model.seed, group=group), plan


def build_training_optimizer(config: Config, model: Model, all_ranks_true=None,
                             max_ids_per_step: Optional[int] = None) -> Optimizer:
    """The run's optimizer with its schedule(s), slots not yet built."""
    if not isinstance(model, WideDeepModel):
        return build_optimizer(config.optimizer, ReferenceSchedule(config.optimizer), amp=config.train.amp,
                               all_ranks_true=all_ranks_true, max_ids_per_step=max_ids_per_step)
    cfg = config.optimizer
    deep = WideDeepSchedule(cfg.deep_learning_rate, cfg.deep_warmup_epochs, config.train.epochs)
    wide = ConstantSchedule(cfg.linear_learning_rate)
    wide_vars = {v.ref() for v in model.wide_variables}
    parts = [name for name, kept in (("deep", has_deep(config.model)), ("wide", has_wide(config.model))) if kept]
    return build_widedeep_optimizer(cfg, deep, wide, lambda var: var.ref() in wide_vars, amp=config.train.amp,
                                    all_ranks_true=all_ranks_true, parts=parts, max_ids_per_step=max_ids_per_step)


@dataclass
class Parts:
    """Everything a mode needs, built once per run."""

    config: Config
    group: dist.ProcessGroup
    spec: FeatureSpec
    contract: FeatureContract  # the dataset's features, read once from `spec`
    embeddings: EmbeddingCollection
    model: Model
    optimizer: Optional[Optimizer] = None  # train mode only
    plan: Optional[Plan] = None  # the placement of a hybrid-parallel embedding layer (None for one process)

    def training_optimizer(self) -> Optimizer:
        if self.optimizer is None:
            raise ValueError("these parts were built without an optimizer (not train mode)")
        return self.optimizer

    @property
    def table_names(self) -> List[str]:
        """The embedding layer's tables by name, in its order (checkpoint pieces refer to them by position)."""
        return [t.name for t in self.embeddings.tables]

    def model_shape(self) -> dict:
        """What a checkpoint must agree with to be restored into this model (see `checkpoint.model_shape`)."""
        return checkpoint.model_shape(self.config.model, self.contract, model_tables(self.config.model, self.contract))

    def checkpoint_variables(self, with_optimizer: bool) -> Tuple[Dict[str, Any], List[PieceSlots], List[PieceSlots]]:
        """(dense {key: var}, stored pieces, held pieces) with optimizer slots/state if requested.

        Dense keys are positional plus a readable name (`006_top_mlp.kernel`): Keras adds
        process-dependent suffixes to layer names, positions are stable for a given model config.
        """
        optimizer = self.training_optimizer() if with_optimizer else None
        table_vars = {var.ref() for _, var in self.embeddings.held_pieces()}
        dense: Dict[str, Any] = {}
        dense_vars = [v for v in self.model.dense_variables if v.ref() not in table_vars]
        for i, var in enumerate(dense_vars):
            key = f"{i:03d}_{_readable(var.name)}"
            dense[key] = var
            if optimizer is not None:
                for slot, slot_var in optimizer.slots_for(var).items():
                    dense[f"{key}.{slot}"] = slot_var
        if optimizer is not None:
            for name, var in optimizer.state_variables().items():
                dense[f"optimizer.{name}"] = var

        def with_slots(pieces) -> List[PieceSlots]:
            out: List[PieceSlots] = []
            for piece, var in pieces:
                slots = {"value": var}
                if optimizer is not None:
                    slots.update(optimizer.slots_for(var))
                out.append((piece, slots))
            return out

        return dense, with_slots(self.embeddings.stored_pieces()), with_slots(self.embeddings.held_pieces())


def _readable(variable_name: str) -> str:
    """'dlrm_model/top_mlp/dense_3/kernel:0' -> 'dlrm_model.top_mlp.dense.kernel'."""
    parts = variable_name.split(":")[0].split("/")
    cleaned = [part.rstrip("0123456789").rstrip("_") or part for part in parts]
    return ".".join(c for c in cleaned if c).replace(" ", "_")


def build_parts(config: Config, dataset_dir: str, group: dist.ProcessGroup, with_optimizer: bool,
                restored: bool = False) -> Parts:
    return parts_for_spec(config, FeatureSpec.load(dataset_dir).validate(), group, with_optimizer, restored)


def parts_for_spec(config: Config, spec: FeatureSpec, group: dist.ProcessGroup, with_optimizer: bool,
                   restored: bool = False) -> Parts:
    """The parts for a validated feature spec (its data files are not read here: export needs only the spec).
    `restored`: every weight is read from a checkpoint next, so no table draws initial values."""
    contract = _checked_contract(config, spec)
    embeddings, plan = build_embeddings(config, contract, group, restored)
    model = _model_over(config, contract, embeddings)
    group.broadcast_variables(model.dense_variables, root_rank=0)  # replicas start equal
    optimizer = None
    if with_optimizer:
        # No step looks up more ids than the global batch's rows times the tables' total hotness.
        optimizer = build_training_optimizer(config, model, all_ranks_true=group.all_ranks_true,
                                             max_ids_per_step=config.data.global_batch_size * embeddings.total_hotness)
        optimizer.build(model.trainable_variables)  # eagerly: slots exist before tracing / restoring
    return Parts(config, group, spec, contract, embeddings, model, optimizer, plan)


def serving_parts(config: Config, spec: FeatureSpec) -> Parts:
    """The one-process model a checkpoint is restored into for serving (`dlrm.export`): its tables whole
    and zeros until the restore, no optimizer, no placement plan; the export checks the memory itself."""
    contract = _checked_contract(config, spec)
    embeddings = LocalEmbedding(_tables(config, contract, restored=True), seed=config.model.seed)
    return Parts(config, dist.single_process(), spec, contract, embeddings, _model_over(config, contract, embeddings))


def _checked_contract(config: Config, spec: FeatureSpec) -> FeatureContract:
    """The model's view of the spec, checked against the model flags before any table is allocated."""
    contract = contract_from_spec(spec, config.model.embedding_dim, config.model.combiner)
    check_model_shape(config.model, contract)
    return contract


def _model_over(config: Config, contract: FeatureContract, embeddings: EmbeddingCollection) -> Model:
    """The model (DLRM, DCNv2 or Wide & Deep) over `embeddings`, in the configured precision."""
    return build_model(config.model, contract, embeddings, amp=config.train.amp, xla=config.train.xla)


def make_reader(parts: Parts, mapping: str, batch_size: int, partial_batch: str = "keep") -> BatchReader:
    """This rank's slice of every global batch of `mapping`."""
    return BatchReader(parts.spec, mapping, batch_size, rank=parts.group.rank, world_size=parts.group.size,
                       partial_batch=partial_batch, prefetch=parts.config.data.prefetch_batches,
                       threads=parts.config.data.decode_threads)
