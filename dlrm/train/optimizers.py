"""SGD, Adagrad, Adam, RMSProp and FTRL whose embedding updates are sparse, and groups of them.

A `tf.IndexedSlices` gradient (what `tf.gather` on a table produces) updates only the rows it
touches, in the variable AND in its slots ("lazy" Adagrad/Adam): untouched rows keep their values
and their moments bit for bit. For Adagrad, Adam, RMSProp and FTRL, duplicate ids in a batch are summed
first (`dlrm.train.duplicate_rows`), so a row seen k times gets one update with the sum of its k gradients
(the gradient of the loss), not k separate ones. SGD's update is linear in the gradient, so it subtracts
the k rows one after the other, in batch order (as Keras' legacy SGD does): the same update up to float
rounding, without the unique + segment-sum pass. Every optimizer but FTRL (which writes its rows) ends a sparse update
by subtracting from the table's rows, for all tables at once (`dlrm.train.row_subtraction`: on
TensorFlow 2.21, whose scatter kernel is slow, large steps run it XLA-compiled, with the same bits).
The scatter is serial, hence deterministic, under TensorFlow's op determinism, which the trainer enables.
Dense tensors (MLP weights) get the ordinary dense update.

Why not Keras optimizers: the new (Keras >= 2.11) optimizers update embedding tables densely, and
the legacy ones do not give sparse *lazy* Adam or a by-name view of the slots for sharded
checkpoints. The update formulas follow Keras' legacy optimizers (Adagrad: initial accumulator 0.1,
epsilon 1e-7; Adam: beta1 0.9, beta2 0.999, epsilon 1e-7, bias correction by the global step;
RMSProp without momentum, epsilon 1e-7; FTRL with learning_rate_power -0.5, initial accumulator 0.1,
no l1 / l2). Keras' legacy RMSProp decays the whole `rms` slot on a sparse update; here only the
touched rows decay (lazy, like the others). Every op runs in a fixed order on CPU, so updates are
deterministic.

`OptimizerGroup` routes each variable to one of several optimizers (Wide & Deep: FTRL for the wide
part, RMSProp or Adagrad for the deep part) behind the same interface as one optimizer.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import tensorflow as tf

from dlrm.choices import named_choice
from dlrm.config import OptimizerConfig
from dlrm.embedding.optimizer_slots import SLOT_NAMES
from dlrm.model.precision import needs_loss_scaling
from dlrm.train.duplicate_rows import sum_duplicate_rows
from dlrm.train.row_subtraction import RowSubtraction, on_cpu
from dlrm.train.schedule import GroupSchedule, Schedule


class RowsToSubtract(NamedTuple):
    """var[rows[i]] -= update[i], in order: a table's own sparse update, done for all tables at once."""

    var: tf.Variable
    rows: tf.Tensor
    update: tf.Tensor


class SparseUpdate(NamedTuple):
    """One table's sparse gradient, ready to apply: its rows (unique unless the optimizer takes them as they
    are) and their gradient rows in the table's dtype."""

    var: tf.Variable
    slots: Dict[str, tf.Variable]
    rows: tf.Tensor
    grad_rows: tf.Tensor


class SparseOptimizer:
    """Base class: slots per variable, an iteration counter, sparse or dense update per gradient."""

    slot_names: Tuple[str, ...] = ()
    slot_initial_value: float = 0.0
    sums_duplicate_rows = True  # False: _apply_sparse gets the gradient's rows as they are

    def __init__(self, schedule, name: str, subtract_rows: Optional[RowSubtraction] = None,
                 max_ids_per_step: Optional[int] = None):
        """`max_ids_per_step`: the most embedding ids one step looks up (the run's global batch x the tables'
        total hotness; None: no bound): the compiled paths a step of that size cannot reach are not traced."""
        self.name = name
        self.schedule = schedule
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name=f"{name}/iterations")
        self._slots: Dict[object, Dict[str, tf.Variable]] = {}
        self.max_ids_per_step = max_ids_per_step
        self.subtract_rows = subtract_rows or RowSubtraction(max_rows=max_ids_per_step)

    # -- state -------------------------------------------------------------------------------
    def build(self, variables: Iterable[tf.Variable]) -> None:
        """Create the slots of `variables` (idempotent). Call eagerly, before tracing and restoring."""
        variables = list(variables)
        self.subtract_rows.build(variables)
        for var in variables:
            if var.ref() in self._slots:
                continue
            base_name = var.name.split(":")[0]
            with tf.init_scope():
                self._slots[var.ref()] = {
                    slot: tf.Variable(
                        tf.fill(var.shape, tf.constant(self.initial_slot_value(slot), var.dtype)),
                        trainable=False, name=f"{base_name}/{slot}",
                    )
                    for slot in self.slot_names
                }

    def initial_slot_value(self, slot: str) -> float:
        return self.slot_initial_value

    def slots_for(self, var: tf.Variable) -> Dict[str, tf.Variable]:
        """Slot variables of `var` by slot name (same shape as `var`); {} for SGD."""
        try:
            return dict(self._slots[var.ref()])
        except KeyError:
            raise KeyError(f"optimizer has no slots for {var.name}: call build() with it first") from None

    def state_variables(self) -> Dict[str, tf.Variable]:
        """Non-slot optimizer state to checkpoint, by name."""
        return {"iterations": self.iterations}

    # -- update ------------------------------------------------------------------------------
    def scale_loss(self, loss):
        """The loss to differentiate: unchanged here; `LossScaledOptimizer` multiplies it."""
        return loss

    def apply(self, grads_and_vars) -> None:
        """Apply one update with lr = schedule(iterations), then advance `iterations`."""
        pairs: List = [(g, v) for g, v in grads_and_vars if g is not None]
        unknown = [v for _, v in pairs if v.ref() not in self._slots]
        if unknown:
            if not tf.executing_eagerly():
                raise RuntimeError(
                    f"{self.name}: no slots for {[v.name for v in unknown][:3]}...; call "
                    f"optimizer.build(variables) eagerly before the tf.function train step"
                )
            self.build(unknown)
        lr = tf.cast(self.schedule(self.iterations), tf.float32)
        step = tf.cast(self.iterations + 1, tf.float32)
        sparse: List[SparseUpdate] = []
        for grad, var in pairs:
            slots = self._slots[var.ref()]
            if isinstance(grad, tf.IndexedSlices):
                with tf.name_scope("embedding_update"):  # op names that step profiles group by
                    rows, values = (sum_duplicate_rows(grad, compiled=on_cpu(var), max_rows=self.max_ids_per_step)
                                    if self.sums_duplicate_rows else (grad.indices, grad.values))
                    sparse.append(SparseUpdate(var, slots, rows, tf.cast(values, var.dtype)))
            else:
                with tf.name_scope("dense_update"):
                    self._apply_dense(var, slots, tf.cast(grad, var.dtype), lr, step)
        if sparse:
            with tf.name_scope("embedding_update"):
                self._apply_sparse_all(sparse, lr, step)
        self.iterations.assign_add(1)

    def _apply_dense(self, var, slots, grad, lr, step) -> None:
        raise NotImplementedError

    def _apply_sparse_all(self, sparse: List[SparseUpdate], lr, step) -> None:
        """Every table's sparse update of the step: the slots table by table, then the tables' own rows in one
        `RowSubtraction` (one compiled call for all tables where TensorFlow's scatter kernel is slow)."""
        subtractions = [self._apply_sparse(u.var, u.slots, u.rows, u.grad_rows, lr, step) for u in sparse]
        done = [subtraction for subtraction in subtractions if subtraction is not None]
        if done:
            self.subtract_rows(*map(list, zip(*done)))

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step) -> Optional[RowsToSubtract]:
        """Update the slots' rows; return what to subtract from the table's rows (None: the rows are written)."""
        raise NotImplementedError


class SparseSGD(SparseOptimizer):
    """var -= lr * grad (legacy Keras SGD without momentum); duplicate rows are subtracted in turn."""

    slot_names = SLOT_NAMES["sgd"]
    sums_duplicate_rows = False

    def _apply_dense(self, var, slots, grad, lr, step):
        var.assign_sub(lr * grad)

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step):
        return RowsToSubtract(var, rows, lr * grad_rows)


class SparseAdagrad(SparseOptimizer):
    """acc += g^2; var -= lr * g / (sqrt(acc) + eps); sparse: only touched rows of var and acc."""

    slot_names = SLOT_NAMES["adagrad"]
    slot_initial_value = 0.1
    epsilon = 1e-7

    def _apply_dense(self, var, slots, grad, lr, step):
        acc = slots["accumulator"]
        acc.assign_add(tf.square(grad))
        var.assign_sub(lr * grad / (tf.sqrt(acc.read_value()) + self.epsilon))

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step):
        acc = slots["accumulator"]
        acc_rows = tf.gather(acc, rows) + tf.square(grad_rows)
        acc.scatter_update(tf.IndexedSlices(acc_rows, rows))
        return RowsToSubtract(var, rows, lr * grad_rows / (tf.sqrt(acc_rows) + self.epsilon))


class SparseAdam(SparseOptimizer):
    """Adam; sparse gradients update only touched rows of var, m and v (lazy Adam)."""

    slot_names = SLOT_NAMES["adam"]
    beta1 = 0.9
    beta2 = 0.999
    epsilon = 1e-7

    def _step_size(self, lr, step):
        return lr * tf.sqrt(1.0 - tf.pow(self.beta2, step)) / (1.0 - tf.pow(self.beta1, step))

    def _apply_dense(self, var, slots, grad, lr, step):
        m, v = slots["m"], slots["v"]
        m.assign(self.beta1 * m + (1.0 - self.beta1) * grad)
        v.assign(self.beta2 * v + (1.0 - self.beta2) * tf.square(grad))
        var.assign_sub(self._step_size(lr, step) * m / (tf.sqrt(v) + self.epsilon))

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step):
        m, v = slots["m"], slots["v"]
        m_rows = self.beta1 * tf.gather(m, rows) + (1.0 - self.beta1) * grad_rows
        v_rows = self.beta2 * tf.gather(v, rows) + (1.0 - self.beta2) * tf.square(grad_rows)
        m.scatter_update(tf.IndexedSlices(m_rows, rows))
        v.scatter_update(tf.IndexedSlices(v_rows, rows))
        return RowsToSubtract(var, rows, self._step_size(lr, step) * m_rows / (tf.sqrt(v_rows) + self.epsilon))


class SparseRMSprop(SparseOptimizer):
    """rms = rho * rms + (1 - rho) g^2; var -= lr * g / (sqrt(rms) + eps) (Keras' legacy RMSprop, no momentum,
    not centered); sparse: only the touched rows of var and rms (the rms of unseen rows does not decay)."""

    slot_names = SLOT_NAMES["rmsprop"]
    epsilon = 1e-7

    def __init__(self, schedule, name: str, rho: float = 0.9, subtract_rows: Optional[RowSubtraction] = None,
                 max_ids_per_step: Optional[int] = None):
        super().__init__(schedule, name, subtract_rows, max_ids_per_step)
        self.rho = float(rho)

    def _apply_dense(self, var, slots, grad, lr, step):
        rms = slots["rms"]
        rms.assign(self.rho * rms + (1.0 - self.rho) * tf.square(grad))
        var.assign_sub(lr * grad / (tf.sqrt(rms.read_value()) + self.epsilon))

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step):
        rms = slots["rms"]
        rms_rows = self.rho * tf.gather(rms, rows) + (1.0 - self.rho) * tf.square(grad_rows)
        rms.scatter_update(tf.IndexedSlices(rms_rows, rows))
        return RowsToSubtract(var, rows, lr * grad_rows / (tf.sqrt(rms_rows) + self.epsilon))


class SparseFtrl(SparseOptimizer):
    """FTRL-Proximal as Keras' legacy Ftrl with learning_rate_power -0.5 and l1 = l2 = 0 (TensorFlow's
    ApplyFtrl kernel): acc' = acc + g^2; linear += g - (sqrt(acc') - sqrt(acc)) / lr * var;
    var = -linear * lr / sqrt(acc'). Sparse: only the touched rows of var, accumulator and linear."""

    slot_names = SLOT_NAMES["ftrl"]

    def __init__(self, schedule, name: str, initial_accumulator: float = 0.1, max_ids_per_step: Optional[int] = None):
        super().__init__(schedule, name, max_ids_per_step=max_ids_per_step)
        if initial_accumulator <= 0:
            raise ValueError(f"FTRL's initial accumulator must be > 0, got {initial_accumulator}")
        self.initial_accumulator = float(initial_accumulator)

    def initial_slot_value(self, slot: str) -> float:
        return self.initial_accumulator if slot == "accumulator" else 0.0

    @staticmethod
    def _update(var, acc, linear, grad, lr):
        """(new var, new accumulator, new linear) of the rows given."""
        new_acc = acc + tf.square(grad)
        new_linear = linear + grad - (tf.sqrt(new_acc) - tf.sqrt(acc)) / lr * var
        return -new_linear / (tf.sqrt(new_acc) / lr), new_acc, new_linear

    def _apply_dense(self, var, slots, grad, lr, step):
        acc, linear = slots["accumulator"], slots["linear"]
        new_var, new_acc, new_linear = self._update(var.read_value(), acc.read_value(), linear.read_value(), grad, lr)
        linear.assign(new_linear)
        acc.assign(new_acc)
        var.assign(new_var)

    def _apply_sparse(self, var, slots, rows, grad_rows, lr, step):
        acc, linear = slots["accumulator"], slots["linear"]
        new_var, new_acc, new_linear = self._update(tf.gather(var, rows), tf.gather(acc, rows),
                                                    tf.gather(linear, rows), grad_rows, lr)
        linear.scatter_update(tf.IndexedSlices(new_linear, rows))
        acc.scatter_update(tf.IndexedSlices(new_acc, rows))
        var.scatter_update(tf.IndexedSlices(new_var, rows))
        return None


class OptimizerGroup:
    """Several optimizers behind one optimizer's interface: each variable goes to the group `group_of` names.

    Slots stay per variable (`slots_for` asks the variable's group), so checkpoints store them by name as
    for one optimizer; the groups' state is prefixed with their names (`wide.iterations`). Every group
    advances its iteration counter on every step (also a group without gradients), so they stay equal.
    """

    def __init__(self, groups: Mapping[str, SparseOptimizer], group_of: Callable[[tf.Variable], str], schedule):
        if not groups:
            raise ValueError("an optimizer group needs at least one optimizer")
        self.groups = dict(groups)
        self.group_of = group_of
        self.schedule = schedule
        self.name = "+".join(self.groups)

    @property
    def iterations(self) -> tf.Variable:
        return next(iter(self.groups.values())).iterations

    def _optimizer_of(self, var) -> SparseOptimizer:
        return self.groups[self.group_of(var)]

    def build(self, variables: Iterable[tf.Variable]) -> None:
        for var in variables:
            self._optimizer_of(var).build([var])

    def slots_for(self, var: tf.Variable) -> Dict[str, tf.Variable]:
        return self._optimizer_of(var).slots_for(var)

    def state_variables(self) -> Dict[str, tf.Variable]:
        return {f"{name}.{key}": var for name, optimizer in self.groups.items()
                for key, var in optimizer.state_variables().items()}

    def scale_loss(self, loss):
        return loss

    def apply(self, grads_and_vars) -> None:
        routed: Dict[str, List] = {name: [] for name in self.groups}
        for grad, var in grads_and_vars:
            routed[self.group_of(var)].append((grad, var))
        for name, optimizer in self.groups.items():
            optimizer.apply(routed[name])


def _grad_values(grad):
    return grad.values if isinstance(grad, tf.IndexedSlices) else grad


def _scale_grad(grad, factor):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values * tf.cast(factor, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad * tf.cast(factor, grad.dtype)


class LossScaledOptimizer:
    """Dynamic loss scaling for float16: scale the loss, unscale the gradients, skip bad steps.

    A step whose gradients contain inf/nan is skipped (no variable, slot or iteration changes) and
    halves the scale; after `growth_interval` good steps in a row the scale doubles. With several
    ranks, `all_ranks_true` makes the skip decision global: embedding-shard gradients are not
    allreduced, so an overflow may show on one rank only, and ranks must never diverge.
    """

    def __init__(self, inner: "SparseOptimizer | OptimizerGroup", initial_scale: float = 2.0**15,
                 growth_interval: int = 2000, all_ranks_true: Optional[Callable] = None):
        self.inner = inner
        self.all_ranks_true = all_ranks_true
        self.growth_interval = int(growth_interval)
        self.loss_scale = tf.Variable(float(initial_scale), dtype=tf.float32, trainable=False,
                                      name="loss_scale")
        self.good_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="loss_scale_good_steps")

    @property
    def iterations(self) -> tf.Variable:
        return self.inner.iterations

    @property
    def schedule(self):
        return self.inner.schedule

    def build(self, variables) -> None:
        self.inner.build(variables)

    def slots_for(self, var) -> Dict[str, tf.Variable]:
        return self.inner.slots_for(var)

    def state_variables(self) -> Dict[str, tf.Variable]:
        state = self.inner.state_variables()
        state.update(loss_scale=self.loss_scale, loss_scale_good_steps=self.good_steps)
        return state

    def scale_loss(self, loss):
        return loss * tf.cast(self.loss_scale, loss.dtype)

    def apply(self, grads_and_vars) -> None:
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        inverse = 1.0 / self.loss_scale
        unscaled = [(_scale_grad(g, inverse), v) for g, v in pairs]
        finite = tf.reduce_all(
            tf.stack([tf.reduce_all(tf.math.is_finite(_grad_values(g))) for g, _ in unscaled])
        ) if unscaled else tf.constant(True)
        if self.all_ranks_true is not None:
            finite = self.all_ranks_true(finite)

        def apply_and_maybe_grow():
            self.inner.apply(unscaled)
            grow = self.good_steps + 1 >= self.growth_interval
            self.loss_scale.assign(tf.where(grow, self.loss_scale * 2.0, self.loss_scale))
            self.good_steps.assign(tf.where(grow, tf.zeros_like(self.good_steps), self.good_steps + 1))
            return tf.constant(True)

        def skip_and_shrink():
            self.loss_scale.assign(tf.maximum(self.loss_scale * 0.5, 1.0))
            self.good_steps.assign(0)
            return tf.constant(False)

        tf.cond(finite, apply_and_maybe_grow, skip_and_shrink)


OPTIMIZERS = {"sgd": SparseSGD, "adagrad": SparseAdagrad, "adam": SparseAdam, "rmsprop": SparseRMSprop,
              "ftrl": SparseFtrl}  # keys: the names in SLOT_NAMES
# NVIDIA's Wide & Deep (TF2) uses RMSprop with rho 0.5 for the deep part.
WIDEDEEP_RMSPROP_RHO = 0.5


def build_optimizer(cfg: OptimizerConfig, schedule, amp: bool = False, all_ranks_true: Optional[Callable] = None,
                    subtract_rows: Optional[RowSubtraction] = None, max_ids_per_step: Optional[int] = None):
    """The optimizer named by `cfg.optimizer`, driven by `schedule`, loss-scaled if float16 AMP.

    `all_ranks_true` (e.g. `ProcessGroup.all_ranks_true`) makes loss scaling's skip decision global.
    `subtract_rows`: how the tables' rows are subtracted (default: `RowSubtraction(max_rows=max_ids_per_step)`,
    this TensorFlow's choice); FTRL writes its rows and takes none. `max_ids_per_step`: see `SparseOptimizer`.
    """
    cls = named_choice(OPTIMIZERS, cfg.optimizer, "optimizer")
    options: Dict[str, Any] = {"max_ids_per_step": max_ids_per_step}
    if subtract_rows is not None:
        options["subtract_rows"] = subtract_rows
    optimizer = cls(schedule, name=cfg.optimizer, **options)
    return LossScaledOptimizer(optimizer, all_ranks_true=all_ranks_true) if needs_loss_scaling(amp) else optimizer


def build_widedeep_optimizer(cfg: OptimizerConfig, deep_schedule: Schedule, wide_schedule: Schedule,
                             is_wide: Callable[[tf.Variable], bool], amp: bool = False,
                             all_ranks_true: Optional[Callable] = None, parts: Sequence[str] = ("deep", "wide"),
                             max_ids_per_step: Optional[int] = None):
    """Wide & Deep's two groups: FTRL for the variables `is_wide` picks, and `cfg.deep_optimizer` (RMSprop
    with rho 0.5, or Adagrad) for the others, each driven by its own schedule. `parts`: the model's parts
    (`--model_type`); only their rates are reported (`lr` is the first part's). `max_ids_per_step`: see
    `SparseOptimizer`."""
    if cfg.deep_optimizer == "rmsprop":
        deep: SparseOptimizer = SparseRMSprop(deep_schedule, name="deep", rho=WIDEDEEP_RMSPROP_RHO,
                                              max_ids_per_step=max_ids_per_step)
    elif cfg.deep_optimizer == "adagrad":
        deep = SparseAdagrad(deep_schedule, name="deep", max_ids_per_step=max_ids_per_step)
    else:
        raise ValueError(f"unknown deep optimizer {cfg.deep_optimizer!r}; choose rmsprop or adagrad")
    wide = SparseFtrl(wide_schedule, name="wide", initial_accumulator=cfg.linear_initial_accumulator,
                      max_ids_per_step=max_ids_per_step)
    group = OptimizerGroup({"deep": deep, "wide": wide}, lambda var: "wide" if is_wide(var) else "deep",
                           GroupSchedule({"deep": deep_schedule, "wide": wide_schedule}, reported=parts))
    return LossScaledOptimizer(group, all_ranks_true=all_ranks_true) if needs_loss_scaling(amp) else group
