"""Wide & Deep training and evaluation throughput at the reference configuration, next to the strongest plain
Keras baseline and the GEMM ceiling.

Measured in ONE process, in alternating windows (`train_throughput.measure`: round-robin, start rotated
every round), medians and best windows reported, so machine noise hits every candidate alike:

- ours: the trainer's real train step (`dlrm.train.step.make_train_step`: LocalEmbedding holding the deep
  and the wide tables, sparse FTRL for the wide part and sparse RMSProp for the deep part, Horovod tape at
  world size 1) and its predict step.
- keras: `tf.keras.experimental.WideDeepModel` over the same features (a linear model of one size-1
  `Embedding` per feature plus a `Dense(1)` over the numericals; a deep model of per-feature `Embedding`s
  and 5 x Dense(1024) with dropout), compiled with two optimizers, the legacy `Ftrl` and legacy `RMSprop`
  (sparse embedding updates; the new Keras optimizers update the tables densely); and its
  `predict_on_batch` for evaluation. `jit_compile=True` is not a candidate: XLA has no kernel for the sparse
  FTRL update (`ResourceSparseApplyFtrl`), so Keras' compiled train step fails at its first call.
- ceiling: TensorFlow fp32 matmul FLOP/s on [batch, 1024] x [1024, 1024] divided by the W&D MLP's FLOPs per
  sample (forward + backward).
- bf16: ours with `--amp` against Keras with the deep MLP under `mixed_bfloat16`, and the bf16 GEMM ceiling,
  reported apart from fp32 (on a CPU without bfloat16 instructions the report says they are emulated).

Data: a few in-memory random batches (ids uniform per table; multi-hot bags of 1..3 ids padded with -1),
cycled, identical for every candidate. Tables are the reference's (`dlrm.data.synthetic.widedeep_reference`), capped
at --max_rows rows. Writes JSON + a markdown table.

    .venv/bin/python -m benchmarks.widedeep_throughput          # ~15 minutes on 2 cores
"""
from __future__ import annotations

import argparse
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from benchmarks import machine
from benchmarks.train_throughput import (
    Candidate,
    begin_run,
    bf16_caveat,
    candidate_row,
    fit_run,
    gemm,
    measure,
    ratio,
    report_head,
    tensorflow_facts,
    throughput_parser,
)
from dlrm.config import Config, DataConfig, ModelConfig, OptimizerConfig, TrainConfig
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.synthetic.widedeep_reference import DEEP_HIDDEN_UNITS, LABEL, NUMERICAL_FEATURES, reference_tables
from dlrm.dist import single_process
from dlrm.features import TableConfig
from dlrm.keras2 import keras
from dlrm.train.build import parts_for_spec
from dlrm.train.step import make_predict_step, make_train_step


def mlp_mflop_per_sample(input_width: int, hidden: Sequence[int]) -> float:
    """FLOPs of the deep MLP per sample, forward + backward (~3x the forward's 2 x MACs), in millions."""
    widths = [input_width, *hidden, 1]
    macs = sum(a * b for a, b in zip(widths[:-1], widths[1:]))
    return 3 * 2 * macs / 1e6


def capped_tables(max_rows: int) -> List[TableConfig]:
    return [TableConfig(t.name, min(t.rows, max_rows), t.dim, t.hotness, t.combiner, t.multi_hot)
            for t in reference_tables()]


def make_batches(tables: Sequence[TableConfig], batch_size: int, count: int, seed: int = 0):
    """(numerical [b, 13], categorical [b, total_hotness] with -1 padding, labels [b]) as constants."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        numerical = rng.random((batch_size, len(NUMERICAL_FEATURES))).astype(np.float32)
        columns = []
        for table in tables:
            ids = rng.integers(0, table.rows, (batch_size, table.hotness))
            if table.hotness > 1:
                length = rng.integers(1, table.hotness + 1, batch_size)
                ids = np.where(np.arange(table.hotness)[None, :] < length[:, None], ids, -1)
            columns.append(ids)
        categorical = np.concatenate(columns, axis=1).astype(np.int32)
        labels = (rng.random(batch_size) < 0.2).astype(np.float32)
        batches.append(tuple(tf.constant(a) for a in (numerical, categorical, labels)))
    return batches


def reference_spec(tables: Sequence[TableConfig]) -> FeatureSpec:
    """A split-binary spec of the reference's features (no files: the benchmark's batches live in memory)."""
    spec = FeatureSpec.split_binary(LABEL, NUMERICAL_FEATURES, {t.name: t.rows for t in tables if not t.multi_hot},
                                    multi_hot={t.name: (t.rows, t.hotness) for t in tables if t.multi_hot})
    for table in tables:
        spec.feature_spec[table.name]["embedding_dim"] = table.dim
    return spec


def ours(tables: Sequence[TableConfig], batches, args, xla: bool = False, amp: bool = False) -> List[Candidate]:
    """The trainer's own train and predict steps of `--arch widedeep` (one process), `--xla` or not, `--amp` or
    not (the bf16 variants are their own groups: compared with Keras' `mixed_bfloat16`, not with fp32)."""
    config = Config(data=DataConfig(global_batch_size=int(batches[0][0].shape[0])),
                    model=ModelConfig(arch="widedeep", deep_dropout=args.dropout),
                    optimizer=OptimizerConfig(linear_learning_rate=args.linear_learning_rate,
                                              deep_learning_rate=args.deep_learning_rate, deep_warmup_epochs=0.0),
                    train=TrainConfig(xla=xla, amp=amp))
    parts = parts_for_spec(config, reference_spec(tables), single_process(), with_optimizer=True)
    parts.training_optimizer().schedule.set_steps_per_epoch(1 << 30)  # the deep rate stays at its first phase
    train_step, predict_step = make_train_step(parts), make_predict_step(parts.model)
    global_rows = tf.constant(float(batches[0][0].shape[0]))
    cursor = [0]

    def train(steps: int) -> int:
        for _ in range(steps):
            numerical, categorical, labels = batches[cursor[0] % len(batches)]
            loss = train_step(numerical, categorical, labels, global_rows, tf.constant(cursor[0] * 1_000_003, tf.int64))
            cursor[0] += 1
        float(loss)
        return steps * int(batches[0][0].shape[0])

    def predict(steps: int) -> int:
        for i in range(steps):
            numerical, categorical, _ = batches[i % len(batches)]
            out = predict_step(numerical, categorical)
        np.asarray(out)
        return steps * int(batches[0][0].shape[0])

    suffix, group = ("_amp" if amp else "") + ("_xla" if xla else ""), "ours" + ("_bf16" if amp else "")
    return [Candidate(f"ours_widedeep_train{suffix}", group, train, extra={"xla": xla, "amp": amp}),
            Candidate(f"ours_widedeep_predict{suffix}", f"{group}_eval", predict, extra={"xla": xla, "amp": amp})]


class BagLookup(keras.layers.Layer):
    """A Keras `Embedding` of rows + 1 (row 0: padding) looked up at ids + 1, padding masked, summed per row."""

    def __init__(self, table: TableConfig, dim: int, initializer, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(table.rows + 1, dim, embeddings_initializer=initializer)

    def call(self, ids):
        vectors = self.embedding(ids + 1)
        mask = tf.cast(ids >= 0, vectors.dtype)[:, :, None]
        return tf.reduce_sum(vectors * mask, axis=1)


def keras_widedeep(tables: Sequence[TableConfig], dropout: float, policy: str = "float32") -> keras.Model:
    """`keras.experimental.WideDeepModel` with NVIDIA's inputs, initialisers and widths; `policy`: the deep
    MLP's Keras dtype policy (the trainer's `--amp` computes the same layers in bfloat16)."""
    inputs = {"numerical": keras.Input([len(NUMERICAL_FEATURES)], dtype=tf.float32, name="numerical"),
              "categorical": keras.Input([sum(t.hotness for t in tables)], dtype=tf.int32, name="categorical")}
    starts = np.cumsum([0] + [t.hotness for t in tables])

    def bags(dim_of: Callable[[TableConfig], int], initializer, prefix: str):
        return [BagLookup(t, dim_of(t), initializer, name=f"{prefix}_{t.name}")(
                inputs["categorical"][:, starts[i]:starts[i + 1]]) for i, t in enumerate(tables)]

    wide = keras.layers.Add()(bags(lambda t: 1, "zeros", "wide")
                                 + [keras.layers.Dense(1, kernel_initializer="zeros")(inputs["numerical"])])
    linear = keras.Model(inputs, wide, name="linear")
    x = keras.layers.Concatenate()(bags(lambda t: t.dim, "glorot_normal", "deep") + [inputs["numerical"]])
    for units in DEEP_HIDDEN_UNITS:
        x = keras.layers.Dense(units, activation="relu", dtype=policy)(x)
        x = keras.layers.Dropout(dropout, dtype=policy)(x)
    deep = keras.Model(inputs, keras.layers.Dense(1, dtype="float32")(x), name="deep")
    return keras.experimental.WideDeepModel(linear, deep, activation=None)


def keras_candidates(tables, batches, args, policy: str = "float32") -> List[Candidate]:
    """Training (`fit`) and evaluation (`predict_on_batch`) candidates of the Keras baseline."""
    model = keras_widedeep(tables, args.dropout, policy)
    model.compile(optimizer=[keras.optimizers.legacy.Ftrl(args.linear_learning_rate),
                             keras.optimizers.legacy.RMSprop(args.deep_learning_rate, rho=0.5)],
                  loss=keras.losses.BinaryCrossentropy(from_logits=True))
    train = fit_run(model, batches, lambda numerical, categorical: {"numerical": numerical, "categorical": categorical})
    batch_size = int(batches[0][0].shape[0])

    def predict(steps: int) -> int:
        for i in range(steps):
            numerical, categorical, _ = batches[i % len(batches)]
            out = model.predict_on_batch({"numerical": numerical, "categorical": categorical})
        np.asarray(out)
        return steps * batch_size

    suffix, group = ("_bf16", "keras_bf16") if policy == "mixed_bfloat16" else ("", "keras")
    return [Candidate(f"keras_widedeep_fit{suffix}", group, train),
            Candidate(f"keras_widedeep_predict{suffix}", f"{group}_eval", predict)]


def summarise(candidates: List[Candidate], args, started: str, load_before, command: str, mflop: float) -> dict:
    wall = machine.medians({c.name: c.samples_per_sec for c in candidates})
    cpu = machine.medians({c.name: c.extra["samples_per_cpu_second"] for c in candidates})
    best = {c.name: max(c.samples_per_sec) for c in candidates}

    def best_of(group: str, values: dict) -> str:
        names = [c.name for c in candidates if c.group == group]
        return max(names, key=values.get) if names else ""

    headline = {}
    for label, values in (("best_window", best), ("median", wall), ("median_per_cpu_second", cpu)):
        keras_train, keras_eval = best_of("keras", values), best_of("keras_eval", values)
        pairs = {  # ratio name: (numerator, denominator); a ratio whose candidate was skipped is left out
            "ours_train_vs_best_keras_train": (best_of("ours", values), keras_train),
            "ours_eval_vs_best_keras_eval": (best_of("ours_eval", values), keras_eval),
            "ours_train_vs_fp32_ceiling": (best_of("ours", values), "ceiling_gemm_float32"),
            "ours_amp_train_vs_keras_bf16_train": (best_of("ours_bf16", values), best_of("keras_bf16", values)),
            "ours_amp_eval_vs_keras_bf16_eval": (best_of("ours_bf16_eval", values), best_of("keras_bf16_eval", values)),
            "ours_amp_train_vs_ours_fp32_train": ("ours_widedeep_train_amp", "ours_widedeep_train"),  # both without XLA
            "ours_amp_train_vs_bf16_ceiling": (best_of("ours_bf16", values), "ceiling_gemm_bfloat16"),
        }
        headline[label] = {**{name: ratio(values[a], values[b]) for name, (a, b) in pairs.items()
                              if a in values and b in values},
                           "best_keras_train": keras_train, "best_keras_eval": keras_eval}
    return {
        **report_head("widedeep_throughput", started, command, load_before, args, dropout=args.dropout,
                      mflop_per_sample=round(mflop, 3), table_rows=[t.rows for t in args.tables]),
        "ratios": headline,
        "candidates": [candidate_row(c, wall, cpu, best) for c in candidates],
    }


def markdown(result: dict, facts: dict) -> List[str]:
    s = result["settings"]
    tables = ("full reference tables" if s["max_rows"] >= max(s["table_rows"])
              else f"reference tables capped at {s['max_rows']:,} rows")
    lines = [f"Wide & Deep throughput, {tables}, batch {s['batch_size']:,}, "
             f"{machine.run_facts(result['date_utc'], facts)}, {tensorflow_facts(result)}, "
             f"{s['intra_op_threads']} intra-op threads, load average "
             f"{result['machine']['load_average_before'][0]:.1f} -> {result['machine']['load_average_after'][0]:.1f}. "
             f"{s['rounds']} alternating windows per candidate. Samples per CPU-second (process time) hardly "
             "depend on other jobs; cores busy = CPU-seconds per wall second of each window.", "",
             "| candidate | best window samples/s | median samples/s | median per CPU-s | cores busy per window |",
             "|---|---:|---:|---:|---|"]
    for c in result["candidates"]:
        cores = " ".join(f"{x:.1f}" for x in c["cores_busy"])
        lines.append(f"| {c['name']} | {c['best_window_samples_per_sec']:,.0f} | {c['median_samples_per_sec']:,.0f} "
                     f"| {c['median_samples_per_cpu_second']:,.0f} | {cores} |")
    for label, values in result["ratios"].items():
        lines += ["", f"{label}: " + ", ".join(f"{k} = {v}" for k, v in values.items())]
    amp_vs_fp32 = result["ratios"]["best_window"].get("ours_amp_train_vs_ours_fp32_train")
    return lines + bf16_caveat(result, amp_vs_fp32) + [
        "", f"Ceiling = GEMM FLOP/s / {s['mflop_per_sample']} MFLOP per sample (the deep MLP, forward + backward).",
        "", f"Command: `{result['command']}`"]


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = throughput_parser(
        "widedeep_throughput", __doc__.split("\n")[0], batch_size=16384,
        batch_help="per-step batch (16384 = the reference 131072 global batch per GPU on 8 GPUs)",
        max_rows=300_000, max_rows_help="cap on rows per table (300000: none)", window_seconds=15.0, rounds=4)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--linear_learning_rate", type=float, default=0.02)
    parser.add_argument("--deep_learning_rate", type=float, default=0.00012)
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> dict:
    args = parse_args(argv)
    command, started, load_before = begin_run("benchmarks.widedeep_throughput", argv, args.threads)
    args.tables = capped_tables(args.max_rows)
    mflop = mlp_mflop_per_sample(sum(t.dim for t in args.tables) + len(NUMERICAL_FEATURES), DEEP_HIDDEN_UNITS)
    batches = make_batches(args.tables, args.batch_size, count=3)
    candidates = [*ours(args.tables, batches, args), *ours(args.tables, batches, args, xla=True),
                  *ours(args.tables, batches, args, amp=True),
                  *keras_candidates(args.tables, batches, args),
                  *keras_candidates(args.tables, batches, args, policy="mixed_bfloat16"),
                  gemm(args.batch_size, tf.float32, mflop), gemm(args.batch_size, tf.bfloat16, mflop)]
    candidates = [c for c in candidates if c.name not in args.skip]
    measure(candidates, args.window_seconds, args.rounds)
    result = summarise(candidates, args, started, load_before, command, mflop)
    machine.write_report(args.output, result, markdown(result, machine.machine_facts()), indent=2)
    return result


if __name__ == "__main__":
    main()
