"""Training-step throughput of the reference DLRM, next to a plain Keras baseline and the GEMM ceiling.

Measured in ONE process, in alternating windows (round-robin over all candidates, start rotated
every round), medians reported, so machine noise hits every candidate alike:

- ours: the trainer's real train step (`dlrm.train.step.make_train_step`: LocalEmbedding,
  sparse SGD, Horovod tape at world size 1) in four variants: fp32, --xla, --amp, --amp --xla.
- keras: the same model as a plain functional Keras model trained with `Model.fit` (Keras Dense
  layers, the autodiff dot interaction `reference_dot_interaction`), in its strongest settings:
  `tf.keras.optimizers.legacy.SGD` (sparse embedding updates; the new Keras SGD updates the tables
  densely), `jit_compile` off and on; plus a `mixed_bfloat16` variant so --amp has a like-for-like
  baseline too.
- ceiling: TensorFlow fp32 (and bf16) matmul FLOP/s on [batch, 1024] x [1024, 1024], divided by
  14.75 MFLOP per sample (DLRM forward + backward), i.e. what the dense part could reach if every
  FLOP ran at GEMM speed.

Data: a few in-memory random batches (ids uniform per table), cycled, identical for every
candidate; reading from disk is not part of the step. Tables are t15-shaped, capped at --max_rows
rows so they fit next to everyone else's jobs here. Writes JSON + a markdown table.

    .venv/bin/python -m benchmarks.train_throughput            # ~12 minutes on 2 shared cores

Wall-clock samples/s is what a user sees; on a shared machine it swings by 2-3x between windows.
Samples per CPU-second (process time over the same window) is reported next to it: it is stable
to ~10% under load, so its ratios are the ones to trust there.

Keras' `Model.fit` is bimodal here: a whole `fit()` call (one window) either keeps both cores busy
(~1.9 cores, about as fast as our step) or only ~1.1 cores (~0.58x as fast), at random, with any
inter-op thread count and with or without prefetch; our own step was never seen in the slow mode.
A median over few windows can then land on either mode, so every candidate is also reported at its
best window and the headline ratios use those: the strongest baseline, as a fair comparison needs.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from benchmarks import machine
from dlrm.config import Config, OptimizerConfig, TrainConfig
from dlrm.data.format.contract import contract_from_spec
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.synthetic.criteo import NUM_CATEGORICAL, NUM_NUMERICAL, preset_cardinalities
from dlrm.dist import single_process
from dlrm.embedding.local import LocalEmbedding, init_scale
from dlrm.features import one_hot_tables
from dlrm.keras2 import keras
from dlrm.model.build import build_model
from dlrm.model.interaction import reference_dot_interaction
from dlrm.train.build import Parts, configure_tensorflow
from dlrm.train.optimizers import build_optimizer
from dlrm.train.schedule import ReferenceSchedule
from dlrm.train.step import make_train_step

MFLOP_PER_SAMPLE = 14.75  # DLRM forward + backward (NVIDIA's DLRM example, reference dims)
GEMM_SHAPE = (1024, 1024)  # [batch, 1024] x [1024, 1024]: the top MLP's typical layer


@dataclass
class Candidate:
    """One measured configuration: `run(steps)` runs that many steps and returns samples processed."""

    name: str
    group: str  # "ours", "keras" or "ceiling"
    run: Callable[[int], int]
    steps_per_window: int = 1
    samples_per_sec: List[float] = field(default_factory=list)
    extra: Dict[str, object] = field(default_factory=dict)


def make_batches(table_sizes, batch_size: int, count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        numerical = rng.normal(size=(batch_size, NUM_NUMERICAL)).astype(np.float32)
        categorical = np.stack([rng.integers(0, n, batch_size) for n in table_sizes], axis=1).astype(np.int32)
        labels = (rng.random(batch_size) < 0.25).astype(np.float32)
        batches.append(tuple(tf.constant(a) for a in (numerical, categorical, labels)))
    return batches


def ours(config: Config, embeddings, batches, amp: bool, xla: bool) -> Candidate:
    """The trainer's own train step for this model variant."""
    spec = FeatureSpec.criteo_like(embeddings.table_sizes, NUM_NUMERICAL)
    contract = contract_from_spec(spec, config.model.embedding_dim)
    model = build_model(config.model, contract, embeddings, amp=amp, xla=xla)
    optimizer = build_optimizer(config.optimizer, ReferenceSchedule(config.optimizer), amp=amp)
    optimizer.build(model.trainable_variables)
    parts = Parts(config=config, group=single_process(), spec=spec, contract=contract, embeddings=embeddings,
                  model=model, optimizer=optimizer)
    train_step = make_train_step(parts)
    global_rows = tf.constant(float(batches[0][0].shape[0]))
    cursor = [0]

    def run(steps: int) -> int:
        rows = 0
        for _ in range(steps):
            numerical, categorical, labels = batches[cursor[0] % len(batches)]
            cursor[0] += 1
            loss = train_step(numerical, categorical, labels, global_rows, tf.constant(0, tf.int64))
            rows += int(numerical.shape[0])
        float(loss)  # wait for the last step
        return rows

    name = "ours" + ("_amp" if amp else "_fp32") + ("_xla" if xla else "")
    return Candidate(name, "ours", run, extra={"amp": amp, "xla": xla})


def keras_baseline_model(config: Config, table_sizes, policy: str) -> keras.Model:
    """The same DLRM as a plain functional Keras model (Embedding + Dense layers)."""
    m = config.model
    numerical = keras.Input([NUM_NUMERICAL], dtype=tf.float32, name="numerical")
    categorical = keras.Input([NUM_CATEGORICAL], dtype=tf.int32, name="categorical")
    vectors = [
        keras.layers.Embedding(
            n, m.embedding_dim, dtype="float32", name=f"embedding_{t}",
            embeddings_initializer=keras.initializers.RandomUniform(-init_scale(n), init_scale(n), seed=t),
        )(categorical[:, t])
        for t, n in enumerate(table_sizes)
    ]
    embedded = keras.layers.Lambda(lambda v: tf.stack(v, axis=1), dtype=policy)(vectors)
    x = numerical
    for units in m.bottom_mlp:
        x = keras.layers.Dense(units, activation="relu", dtype=policy)(x)
    x = keras.layers.Lambda(lambda a: reference_dot_interaction(a[0], a[1]), dtype=policy)([x, embedded])
    for i, units in enumerate(m.top_mlp):
        last = i == len(m.top_mlp) - 1
        x = keras.layers.Dense(units, activation=None if last else "relu",
                                  dtype="float32" if last else policy)(x)
    return keras.Model([numerical, categorical], x)


def fit_run(model: keras.Model, batches, inputs: Callable = lambda numerical, categorical: (numerical, categorical)
            ) -> Callable[[int], int]:
    """`run(steps)` of a Keras baseline: `model.fit` over the in-memory (numerical, categorical, label)
    `batches`, cycled; `inputs` arranges a batch's features as the model takes them. Returns samples trained."""
    features = inputs(tf.stack([b[0] for b in batches]), tf.stack([b[1] for b in batches]))
    labels = tf.stack([b[2][:, None] for b in batches])
    iterator = iter(tf.data.Dataset.from_tensor_slices((features, labels)).repeat().prefetch(2))
    batch_size = int(batches[0][0].shape[0])

    def run(steps: int) -> int:
        model.fit(iterator, steps_per_epoch=steps, epochs=1, verbose=0)
        return steps * batch_size

    return run


def keras_fit_candidate(config: Config, table_sizes, batches, jit_compile: bool, policy: str, model=None) -> Candidate:
    model = model or keras_baseline_model(config, table_sizes, policy)
    model.compile(optimizer=keras.optimizers.legacy.SGD(learning_rate=config.optimizer.learning_rate),
                  loss=keras.losses.BinaryCrossentropy(from_logits=True), jit_compile=jit_compile)
    run = fit_run(model, batches)
    name = "keras_fit" + ("_bf16" if policy != "float32" else "_fp32") + ("_jit" if jit_compile else "")
    candidate = Candidate(name, "keras", run, extra={"jit_compile": jit_compile, "policy": policy})
    candidate.extra["model"] = model  # reused by the other jit setting (same layers), dropped from JSON
    return candidate


def gemm(batch_size: int, dtype: tf.DType, mflop_per_sample: float = MFLOP_PER_SAMPLE) -> Candidate:
    a = tf.cast(tf.random.stateless_normal([batch_size, GEMM_SHAPE[0]], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal(GEMM_SHAPE, seed=[3, 4]), dtype)
    # Reduce the whole product so no part of the GEMM can be pruned away.
    matmul = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
    flops = 2.0 * batch_size * GEMM_SHAPE[0] * GEMM_SHAPE[1]

    def run(steps: int) -> int:
        for _ in range(steps):
            out = matmul()
        float(out)
        # Reported as "samples/s at the ceiling": FLOPs / the model's MFLOP per sample.
        return int(round(steps * flops / (mflop_per_sample * 1e6)))

    return Candidate(f"ceiling_gemm_{dtype.name}", "ceiling", run, extra={"gemm": f"[{batch_size},1024]x[1024,1024]"})


def calibrate(candidate: Candidate, window_seconds: float) -> None:
    """Warm up (compile), then pick the step count that fills one window."""
    start = time.perf_counter()
    candidate.run(1)
    candidate.extra["first_step_seconds"] = round(time.perf_counter() - start, 2)
    start = time.perf_counter()
    candidate.run(1)
    step_seconds = max(time.perf_counter() - start, 1e-4)
    candidate.steps_per_window = max(1, int(math.ceil(window_seconds / step_seconds)))
    print(f"  {candidate.name}: first step {candidate.extra['first_step_seconds']} s, then "
          f"{step_seconds:.3f} s/step -> {candidate.steps_per_window} steps per window", flush=True)


def ratio(a: float, b: float) -> float:
    return round(a / b, 3) if b else float("nan")


def ratios_for(median: Dict[str, float], candidates: List[Candidate]) -> dict:
    """The headline ratios for one metric (wall-clock or CPU-time samples/s medians); a ratio whose
    candidate was skipped (`--skip`) is left out."""
    group = {c.name: c.group for c in candidates}

    def fastest(names: List[str]) -> Optional[str]:
        return max(names, key=median.__getitem__) if names else None

    best = {
        "ours": fastest([n for n in median if group[n] == "ours"]),
        "ours_fp32": fastest([n for n in median if group[n] == "ours" and "_fp32" in n]),
        "keras_fp32": fastest([n for n in median if group[n] == "keras" and "_fp32" in n]),
        "keras_bf16": fastest([n for n in median if group[n] == "keras" and "_bf16" in n]),
    }
    named = {**best, "fp32_ceiling": "ceiling_gemm_float32", "bf16_ceiling": "ceiling_gemm_bfloat16",
             "ours_amp": "ours_amp"}
    pairs = {
        "best_ours_vs_best_keras_fp32": ("ours", "keras_fp32"),
        "best_ours_fp32_vs_best_keras_fp32": ("ours_fp32", "keras_fp32"),
        "best_ours_vs_fp32_ceiling": ("ours", "fp32_ceiling"),
        "best_ours_fp32_vs_fp32_ceiling": ("ours_fp32", "fp32_ceiling"),
        "ours_amp_vs_ours_fp32": ("ours_amp", "ours_fp32"),
        "ours_amp_vs_best_keras_bf16": ("ours_amp", "keras_bf16"),
        "ours_amp_vs_bf16_ceiling": ("ours_amp", "bf16_ceiling"),
    }
    out: dict = {"best": {key: name for key, name in best.items() if name}}
    for key, (numerator, denominator) in pairs.items():
        if named[numerator] in median and named[denominator] in median:
            out[key] = ratio(median[named[numerator]], median[named[denominator]])
    return out


def summarise(candidates: List[Candidate], args, started: str, load_before, command: str) -> dict:
    wall = machine.medians({c.name: c.samples_per_sec for c in candidates})
    cpu = machine.medians({c.name: c.extra["samples_per_cpu_second"] for c in candidates})
    best_window = {c.name: max(c.samples_per_sec) for c in candidates}
    return {
        **report_head("train_throughput", started, command, load_before, args, inter_op_threads=1,
                      op_determinism=True, mflop_per_sample=MFLOP_PER_SAMPLE, table_rows=args.table_sizes,
                      learning_rate=args.learning_rate),
        # Wall clock is what a user sees; samples per CPU-second (process time over the window) is far
        # less sensitive to other jobs on a shared machine. Both are medians over the same windows.
        # Best window of each candidate: the headline (Keras' fit() is bimodal, see the docstring).
        "ratios_best_window": ratios_for(best_window, candidates),
        "ratios_wall": ratios_for(wall, candidates),
        "ratios_cpu_time": ratios_for(cpu, candidates),
        "gemm_gflops_wall": {n: round(v * MFLOP_PER_SAMPLE / 1e3, 1) for n, v in wall.items()
                             if n.startswith("ceiling")},
        "gemm_gflops_per_cpu_second": {n: round(v * MFLOP_PER_SAMPLE / 1e3, 1) for n, v in cpu.items()
                                       if n.startswith("ceiling")},
        "candidates": [candidate_row(c, wall, cpu, best_window) for c in candidates],
    }


def onednn_on() -> Optional[bool]:
    """Whether TensorFlow runs its oneDNN kernels in this process (None where the build does not say)."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    return bool(_pywrap_util_port.IsMklEnabled())


def tensorflow_facts(result: dict) -> str:
    """A report's TensorFlow, for its header line: the version and whether the oneDNN kernels were on."""
    onednn = {True: "on", False: "off"}.get(result["machine"].get("onednn"), "unknown")
    return f"TensorFlow {result['machine']['tensorflow']} (oneDNN {onednn})"


def report_head(benchmark: str, started: str, command: str, load_before: list, args, **settings) -> dict:
    """The start of a throughput report: what ran, when, on what machine (cores, CPU flags, platform,
    TensorFlow, load average before and after), and its settings (the shared flags first)."""
    return {
        "benchmark": benchmark,
        "date_utc": started,
        "command": command,
        "machine": {"cpus": os.cpu_count(), "cpu_flags": machine.cpu_flags(), "native_bf16": machine.native_bf16(),
                    "platform": platform.platform(),
                    "tensorflow": tf.__version__, "onednn": onednn_on(), "load_average_before": load_before,
                    "load_average_after": list(os.getloadavg())},
        "settings": {"batch_size": args.batch_size, "max_rows": args.max_rows, "window_seconds": args.window_seconds,
                     "rounds": args.rounds, "intra_op_threads": args.threads, **settings},
    }


def candidate_row(c: Candidate, wall: Dict[str, float], cpu: Dict[str, float], best: Dict[str, float]) -> dict:
    """One candidate in a report: medians, best window, every window, and its extra figures (not its model)."""
    return {"name": c.name, "group": c.group, "median_samples_per_sec": round(wall[c.name], 1),
            "median_samples_per_cpu_second": round(cpu[c.name], 1),
            "best_window_samples_per_sec": round(best[c.name], 1),
            "windows_samples_per_sec": [round(v, 1) for v in c.samples_per_sec],
            "steps_per_window": c.steps_per_window,
            **{k: ([round(x, 2) for x in v] if isinstance(v, list) else v) for k, v in c.extra.items() if k != "model"}}


def markdown(result: dict, facts: dict) -> list[str]:
    """The markdown table of `summarise`'s result (`facts`: the machine, as `machine_facts()` gives it)."""
    by_name = {c["name"]: c for c in result["candidates"]}

    def keras_fp32(ratios: str, field: str) -> Optional[float]:  # None: Keras fp32 was skipped
        name = result[ratios]["best"].get("keras_fp32")
        return by_name[name][field] if name else None

    keras_best = keras_fp32("ratios_best_window", "best_window_samples_per_sec")
    keras_wall = keras_fp32("ratios_wall", "median_samples_per_sec")
    keras_cpu = keras_fp32("ratios_cpu_time", "median_samples_per_cpu_second")
    ceiling = by_name.get("ceiling_gemm_float32", {}).get("best_window_samples_per_sec")

    def versus(value: float, reference: Optional[float], unit: str = "x") -> str:
        return f"{ratio(value, reference):.2f}{unit}" if reference else "—"

    lines = [
        f"Training-step throughput, DLRM reference dims, batch {result['settings']['batch_size']}, "
        f"{machine.run_facts(result['date_utc'], facts)}, {tensorflow_facts(result)}, "
        f"{result['settings']['intra_op_threads']} intra-op threads, load average "
        f"{result['machine']['load_average_before'][0]:.1f} -> {result['machine']['load_average_after'][0]:.1f} "
        f"(shared machine). {result['settings']['rounds']} alternating windows per candidate: best window "
        f"(headline: Keras' fit() is bimodal, see 'cores busy') and medians.",
        "",
        "| candidate | best window samples/s | vs best Keras fp32 | vs fp32 GEMM ceiling "
        "| median samples/s (vs Keras) | median per CPU-s (vs Keras) | cores busy per window |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for c in result["candidates"]:
        b, w, p = c["best_window_samples_per_sec"], c["median_samples_per_sec"], c["median_samples_per_cpu_second"]
        cores = " ".join(f"{x:.1f}" for x in c["cores_busy"])
        lines.append(f"| {c['name']} | {b:,.0f} | {versus(b, keras_best)} | {versus(b, ceiling, '')} "
                     f"| {w:,.0f} ({versus(w, keras_wall)}) | {p:,.0f} ({versus(p, keras_cpu)}) | {cores} |")
    for key in ("ratios_best_window", "ratios_wall", "ratios_cpu_time"):
        lines += ["", f"{key}: " + ", ".join(f"{k} = {v}" for k, v in result[key].items() if k != "best")]
    return lines + bf16_caveat(result, result["ratios_best_window"].get("ours_amp_vs_ours_fp32")) + [
        "", "GEMM GFLOP/s (wall): " + ", ".join(f"{k} = {v}" for k, v in result["gemm_gflops_wall"].items())
        + "; per CPU-second: " + ", ".join(f"{k} = {v}" for k, v in result["gemm_gflops_per_cpu_second"].items())
        + f". Ceiling = GEMM FLOP/s / {MFLOP_PER_SAMPLE} MFLOP per sample.", "",
        f"Command: `{result['command']}`"]


def bf16_caveat(result: dict, amp_vs_fp32: Optional[float]) -> list[str]:
    """On a CPU without bfloat16 instructions, the report's line saying so: there `--amp` is emulated and
    slower than fp32, so its ratios measure the emulation, not a target (`result`: a report with `report_head`'s
    machine; `amp_vs_fp32`: ours with `--amp` over ours in fp32, best windows, if measured)."""
    if result["machine"]["native_bf16"]:
        return []
    measured = f" (here the trainer's `--amp` step runs at {amp_vs_fp32}x of its fp32 step, best windows)" \
        if amp_vs_fp32 is not None and math.isfinite(amp_vs_fp32) else ""
    return ["", f"This CPU has no bfloat16 instructions (no AVX512-BF16, AMX or Arm BF16): bfloat16 is emulated and "
                f"slower than fp32{measured}, so the bf16 ratios above do not measure a bf16 target."]


def throughput_parser(name: str, description: str, batch_size: int, batch_help: str, max_rows: int,
                      max_rows_help: str, window_seconds: float, rounds: int) -> argparse.ArgumentParser:
    """The flags of a throughput benchmark (with its own defaults); `name`: its report's file name."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--batch_size", type=int, default=batch_size, help=batch_help)
    parser.add_argument("--max_rows", type=int, default=max_rows, help=max_rows_help)
    parser.add_argument("--window_seconds", type=float, default=window_seconds)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--skip", nargs="*", default=[], help="candidate names to leave out")
    parser.add_argument("--output", default=os.path.join(machine.RESULTS, f"{name}.json"))
    return parser


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    parser = throughput_parser(
        "train_throughput", __doc__.split("\n")[0], batch_size=8192,
        batch_help="per-step batch (8192 = the reference 65536 global batch per device on 8 devices)",
        max_rows=200_000, max_rows_help="cap on rows per t15-shaped table", window_seconds=10.0, rounds=6)
    parser.add_argument("--learning_rate", type=float, default=0.01, help="constant lr, same for every candidate")
    return parser.parse_args(argv)


def reference_config(learning_rate: float) -> Config:
    """Reference dims (128, 512-256-128, 1024-1024-512-256-1), plain SGD at a constant learning rate."""
    config = Config()
    config.optimizer = OptimizerConfig(optimizer="sgd", learning_rate=learning_rate, warmup_steps=0,
                                       decay_start_step=0, decay_steps=0)
    return config


def build_candidates(config: Config, args: argparse.Namespace) -> List[Candidate]:
    """Our four step variants, the Keras baselines and the GEMM ceilings, minus `--skip`."""
    batches = make_batches(args.table_sizes, args.batch_size, count=4)
    print(f"building tables: {sum(args.table_sizes):,} rows x {config.model.embedding_dim}", flush=True)
    embeddings = LocalEmbedding(one_hot_tables(args.table_sizes, config.model.embedding_dim), seed=0)  # shared
    candidates = [ours(config, embeddings, batches, amp, xla)
                  for amp, xla in ((False, False), (False, True), (True, False), (True, True))]
    keras_fp32 = keras_fit_candidate(config, args.table_sizes, batches, jit_compile=False, policy="float32")
    # A second Model object over the same layers (shared weights, no second copy of the tables),
    # compiled with XLA: each compile keeps its own train function.
    shared = keras_fp32.extra["model"]
    keras_fp32_jit = keras_fit_candidate(config, args.table_sizes, batches, jit_compile=True, policy="float32",
                                         model=keras.Model(shared.inputs, shared.outputs))
    candidates += [keras_fp32, keras_fp32_jit,
                   keras_fit_candidate(config, args.table_sizes, batches, jit_compile=False, policy="mixed_bfloat16"),
                   gemm(args.batch_size, tf.float32), gemm(args.batch_size, tf.bfloat16)]
    return [c for c in candidates if c.name not in args.skip]


def record(candidate: Candidate, window: machine.Window[int]) -> None:
    """Add one window's samples/s, samples per CPU-second and cores busy to the candidate."""
    cpu = max(window.cpu_seconds, 1e-9)
    candidate.samples_per_sec.append(window.value / window.wall_seconds)
    candidate.extra.setdefault("samples_per_cpu_second", []).append(window.value / cpu)
    candidate.extra.setdefault("cores_busy", []).append(cpu / window.wall_seconds)


def measure(candidates: List[Candidate], window_seconds: float, rounds: int) -> None:
    """Calibrate each candidate, then `rounds` rounds of one window each, start rotated every round."""
    print("warm-up and calibration:", flush=True)
    for candidate in candidates:
        calibrate(candidate, window_seconds)

    def after_round(round_index: int, windows: Dict[str, List[machine.Window[int]]]) -> None:
        for candidate in candidates:
            record(candidate, windows[candidate.name][-1])
        print(f"round {round_index + 1}/{rounds}: " + ", ".join(
            f"{c.name} {c.samples_per_sec[-1]:,.0f}" for c in candidates), flush=True)

    machine.alternate_windows({c.name: partial(c.run, c.steps_per_window) for c in candidates}, rounds, rotate=True,
                              after_round=after_round)


def begin_run(module: str, argv: Optional[list[str]], threads: int) -> tuple[str, str, list]:
    """(command, start time, load average) for the report, then TensorFlow set up with `threads` intra-op threads."""
    begun = (machine.command_line(module, argv), machine.utc_now(minutes=True), list(os.getloadavg()))
    configure_tensorflow(TrainConfig(intra_op_threads=threads, inter_op_threads=1, seed=0))
    return begun


def main(argv: Optional[list[str]] = None) -> dict:
    args = parse_args(argv)
    command, started, load_before = begin_run("benchmarks.train_throughput", argv, args.threads)
    config = reference_config(args.learning_rate)
    args.table_sizes = [min(n, args.max_rows) for n in preset_cardinalities("t15")]
    candidates = build_candidates(config, args)
    measure(candidates, args.window_seconds, args.rounds)
    result = summarise(candidates, args, started, load_before, command)
    machine.write_report(args.output, result, markdown(result, machine.machine_facts()), indent=2)
    return result


if __name__ == "__main__":
    main()
