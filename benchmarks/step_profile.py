"""Where the training step's time goes: the trainer's real step under TensorFlow's profiler, op time summed
by class, next to what each class would take at the machine's measured GEMM rate or memory bandwidth.

The step is `benchmarks.train_throughput`'s "ours" (reference dims, batch 8192, t15-shaped tables capped at
--max_rows), or with `--arch widedeep` `benchmarks.widedeep_throughput`'s (NVIDIA's W&D tables, 5 x 1024,
dropout 0.1, batch 16384); 2 intra-op threads, one inter-op thread: ops run one after another, each on both
cores; in fp32 and with --amp. After --warmup steps, --steps steps are recorded; every op the executor ran
is put in one class by its name and type:

- mlp_gemm:     the MLPs' matrix products, forward and backward (MatMul and its fused forms);
- interaction:  every op under the dot interaction's name scope, forward and backward;
- embedding:    the lookups (gathers, the bags' segment sums, stacking the tables' outputs) and their
                sparse gradients and updates (with the XLA-compiled duplicate-row sums and, on TensorFlow
                2.21, row subtraction);
- dense_update: the optimizer's update of the dense weights;
- elementwise:  bias, ReLU and their gradients (W&D: ReLU and dropout, XLA-compiled), casts, the loss,
                everything else.

The trace does not name the compiled function an XLA run belongs to; a run whose kernels include a scatter
is a duplicate-row sum or the row subtraction, any other the W&D's ReLU and dropout (the only compiled
functions in these steps).

The rest of the step's wall time (between ops and around the step call) is `outside ops`.

Ideals, from figures measured in the same process just before: a GEMM class at the GEMM rate of its precision
([batch, 1024] x [1024, 1024], as the train_throughput ceiling) over its FLOPs; the embedding over the bytes
it must move (each looked-up row read and written once forward; the gradient rows read and the table rows
read and written once by the update) at the memory bandwidth of a large copy. The ideal is a lower bound:
the work at the best rate this machine showed, with nothing else in between.

    .venv/bin/python -m benchmarks.step_profile                    # ~2 minutes
    .venv/bin/python -m benchmarks.step_profile --arch widedeep    # ~3 minutes
"""
from __future__ import annotations

import argparse
import glob
import itertools
import os
import shutil
import tempfile
import time
from collections import defaultdict
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from benchmarks import machine, widedeep_throughput
from benchmarks.train_throughput import (
    GEMM_SHAPE,
    begin_run,
    make_batches,
    ours,
    reference_config,
    report_head,
    tensorflow_facts,
)
from dlrm.config import Config
from dlrm.data.synthetic.criteo import NUM_NUMERICAL, preset_cardinalities
from dlrm.data.synthetic.widedeep_reference import DEEP_HIDDEN_UNITS, NUMERICAL_FEATURES
from dlrm.embedding.local import LocalEmbedding
from dlrm.features import one_hot_tables
from dlrm.model.interaction import NAME_SCOPE as INTERACTION_SCOPE
from dlrm.model.interaction import dot_interaction_output_dim

CLASSES = ("mlp_gemm", "interaction", "embedding", "dense_update", "elementwise")
GEMM_TYPES = ("MatMul", "_MklMatMul", "_FusedMatMul", "_MklFusedMatMul", "_MklNativeFusedMatMul",
              "BatchMatMulV2", "BatchMatMulV3", "_MklBatchMatMulV2")
EMBEDDING_TYPES = ("ResourceGather", "GatherV2", "ResourceScatterAdd", "ResourceScatterSub",
                   "ResourceScatterUpdate", "UnsortedSegmentSum", "SparseSegmentSum", "SparseSegmentMean",
                   "ResourceSparseApplyAdagrad", "ResourceSparseApplyAdagradV2", "ResourceSparseApplyFtrl")
DENSE_UPDATE_TYPES = ("ResourceApplyGradientDescent", "ResourceApplyAdagradV2", "ResourceApplyAdam",
                      "ResourceApplyRMSProp", "ResourceApplyFtrl", "AssignSubVariableOp", "AssignAddVariableOp")


# How the trace names a run of an XLA-compiled function (its ops are not executor ops), and how we do.
XLA_RUN = "CpuExecutable::ExecuteAsyncOnStream"
XLA_ROW_UPDATE = "XLA row sums + subtraction"
XLA_RELU_DROPOUT = "XLA ReLU + dropout"


def op_class(name: str, op_type: str) -> str:
    """The class of one executed op, from its full name ("scope/.../op") and its type."""
    scopes = name.split(":")[0].split("/")
    if any(scope.startswith(INTERACTION_SCOPE) for scope in scopes):  # the forward and the gradient scope
        return "interaction"
    if op_type in GEMM_TYPES:
        return "mlp_gemm"
    if "embedding" in name.lower() or op_type in EMBEDDING_TYPES:  # the layer's and the update's scopes
        return "embedding"
    if "dense_update" in scopes or op_type in DENSE_UPDATE_TYPES:
        return "dense_update"
    return "elementwise"


def _xla_run_kinds(events: list, metadata: dict) -> Dict[int, tuple]:
    """(class, type) of every XLA run among one trace line's `events`, by index: the embedding update's if one
    of the kernels inside it (the events it encloses) is a scatter, else the ReLU and dropout."""
    spans = sorted((event.offset_ps, event.offset_ps + event.duration_ps, metadata[event.metadata_id].name, i)
                   for i, event in enumerate(events))
    kinds = {}
    for position, (start, end, name, index) in enumerate(spans):
        if name != XLA_RUN:
            continue
        inner = itertools.takewhile(lambda span: span[0] < end, spans[position + 1:])
        scatter = any("scatter" in span[2] for span in inner)
        kinds[index] = ("embedding", XLA_ROW_UPDATE) if scatter else ("elementwise", XLA_RELU_DROPOUT)
    return kinds


def op_seconds(logdir: str) -> Dict[str, Dict[str, float]]:
    """Seconds per (class, op type) of every op the executor ran in the profile written under `logdir`."""
    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        raise RuntimeError(f"the profiler wrote no trace under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    spent: Dict[str, Dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            xla_runs = _xla_run_kinds(list(line.events), plane.event_metadata)
            for index, event in enumerate(line.events):
                metadata = plane.event_metadata[event.metadata_id]
                if index in xla_runs:
                    cls, kind = xla_runs[index]
                    spent[cls][kind] += event.duration_ps * 1e-12
                    continue
                if ":" not in metadata.name or not metadata.display_name:
                    continue  # executor bookkeeping, not an op
                op_type = metadata.display_name
                spent[op_class(metadata.name, op_type)][op_type] += event.duration_ps * 1e-12
    return spent


def gemm_flops_per_second(dtype: tf.DType, batch: int, seconds: float = 3.0) -> float:
    """FLOP/s of a [batch, 1024] x [1024, 1024] product, best of repeated calls over `seconds`."""
    a = tf.cast(tf.random.stateless_normal([batch, GEMM_SHAPE[0]], seed=[1, 2]), dtype)
    b = tf.cast(tf.random.stateless_normal(GEMM_SHAPE, seed=[3, 4]), dtype)
    product = tf.function(lambda: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
    float(product())
    return 2.0 * batch * GEMM_SHAPE[0] * GEMM_SHAPE[1] / _best_seconds(lambda: float(product()), seconds)


def memory_bytes_per_second(megabytes: int = 512, seconds: float = 3.0) -> float:
    """Bytes moved per second (read + written) by a large array copy, best of repeated copies."""
    source = np.ones(megabytes * 2**20 // 4, np.float32)
    target = np.empty_like(source)
    return 2.0 * source.nbytes / _best_seconds(lambda: np.copyto(target, source), seconds)


def _best_seconds(call, seconds: float) -> float:
    best, until = float("inf"), time.perf_counter() + seconds
    while time.perf_counter() < until:
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def mlp_flops(config: Config, batch: int) -> float:
    """Forward + backward FLOPs of both MLPs (3 GEMMs of 2 x in x out per row and layer)."""
    model = config.model
    bottom = [NUM_NUMERICAL, *model.bottom_mlp]
    top = [dot_interaction_output_dim(len(preset_cardinalities("t15")), model.embedding_dim), *model.top_mlp]
    pairs = list(zip(bottom, bottom[1:])) + list(zip(top, top[1:]))
    return 3 * 2.0 * batch * sum(i * o for i, o in pairs)


def interaction_flops(config: Config, batch: int) -> float:
    """Forward + backward FLOPs of the batched dot products (27 vectors of dim 128 per row)."""
    vectors = len(preset_cardinalities("t15")) + 1
    return 3 * 2.0 * batch * vectors * vectors * config.model.embedding_dim


def embedding_bytes(values_per_sample: int, batch: int, element_bytes: int = 4) -> float:
    """Bytes the lookups and the sparse update must move, `values_per_sample` looked-up values per sample:
    every looked-up row read and its copy written (forward); the gradient rows read and the table rows read
    and written (update)."""
    return batch * values_per_sample * element_bytes * (2 + 3)


def profile(candidate, steps: int, warmup: int) -> tuple[Dict[str, Dict[str, float]], float]:
    """(seconds per class and op type over `steps` steps, the steps' wall seconds) of one candidate."""
    candidate.run(warmup)
    logdir = tempfile.mkdtemp(prefix="step_profile_")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    candidate.run(steps)
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    try:
        return op_seconds(logdir), wall
    finally:
        shutil.rmtree(logdir, ignore_errors=True)


def dlrm_setup(args) -> tuple[Callable[[bool], object], Dict[str, float]]:
    """(the step's candidate for amp or not, its work by class) at the DLRM reference dims."""
    config = reference_config(0.01)
    table_sizes = [min(n, args.max_rows) for n in preset_cardinalities("t15")]
    batches = make_batches(table_sizes, args.batch_size, count=4)
    embeddings = LocalEmbedding(one_hot_tables(table_sizes, config.model.embedding_dim), seed=0)
    work = {"mlp_gemm": mlp_flops(config, args.batch_size), "interaction": interaction_flops(config, args.batch_size),
            "embedding": embedding_bytes(len(table_sizes) * config.model.embedding_dim, args.batch_size)}
    return lambda amp: ours(config, embeddings, batches, amp=amp, xla=False), work


def widedeep_setup(args) -> tuple[Callable[[bool], object], Dict[str, float]]:
    """(the step's candidate for amp or not, its work by class) of the reference Wide & Deep."""
    options = widedeep_throughput.parse_args(["--batch_size", str(args.batch_size), "--max_rows", str(args.max_rows)])
    tables = widedeep_throughput.capped_tables(args.max_rows)
    batches = widedeep_throughput.make_batches(tables, args.batch_size, count=3)
    deep_input = sum(t.dim for t in tables) + len(NUMERICAL_FEATURES)
    work = {"mlp_gemm": widedeep_throughput.mlp_mflop_per_sample(deep_input, DEEP_HIDDEN_UNITS) * 1e6 * args.batch_size,
            "embedding": embedding_bytes(sum(t.hotness * (t.dim + 1) for t in tables), args.batch_size)}  # deep + wide
    return lambda amp: widedeep_throughput.ours(tables, batches, options, amp=amp)[0], work


class Arch(NamedTuple):
    """How to profile one --arch: build its step, its default batch and table cap, its report's name."""

    setup: Callable[[argparse.Namespace], tuple[Callable[[bool], object], Dict[str, float]]]
    batch_size: int
    max_rows: int
    report: str


ARCHS = {"dlrm": Arch(dlrm_setup, 8192, 200_000, "step_profile"),
         "widedeep": Arch(widedeep_setup, 16384, 300_000, "step_profile_widedeep")}


def main(argv: Optional[List[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=tuple(ARCHS), default="dlrm")
    parser.add_argument("--batch_size", type=int, help="default: 8192 (DLRM), 16384 (W&D)")
    parser.add_argument("--max_rows", type=int, help="cap on rows per table; default: 200000 (DLRM), 300000 (W&D)")
    parser.add_argument("--steps", type=int, default=10, help="steps recorded per variant")
    parser.add_argument("--warmup", type=int, default=3, help="steps run before recording")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--rate_seconds", type=float, default=3.0, help="time spent measuring each rate")
    parser.add_argument("--output", help="default: benchmarks/results/step_profile[_widedeep].json")
    args = parser.parse_args(argv)
    arch = ARCHS[args.arch]
    args.batch_size = args.batch_size or arch.batch_size
    args.max_rows = args.max_rows or arch.max_rows
    args.output = args.output or os.path.join(machine.RESULTS, f"{arch.report}.json")
    command, started, load_before = begin_run("benchmarks.step_profile", argv, args.threads)
    candidate, work = arch.setup(args)
    rates = {"gemm_fp32": gemm_flops_per_second(tf.float32, args.batch_size, args.rate_seconds),
             "gemm_bf16": gemm_flops_per_second(tf.bfloat16, args.batch_size, args.rate_seconds),
             "memory": memory_bytes_per_second(seconds=args.rate_seconds)}
    variants = {}
    for amp in (False, True):
        name = "amp" if amp else "fp32"
        spent, wall = profile(candidate(amp), args.steps, args.warmup)
        gemm_rate = rates["gemm_bf16" if amp else "gemm_fp32"]
        ideal = {cls: amount / (rates["memory"] if cls == "embedding" else gemm_rate) for cls, amount in work.items()}
        per_step = {c: sum(spent.get(c, {}).values()) / args.steps for c in CLASSES}
        variants[name] = {
            "step_seconds": wall / args.steps,
            "class_seconds": per_step,
            "outside_ops_seconds": wall / args.steps - sum(per_step.values()),
            "ideal_seconds": ideal,
            "top_op_types": {c: dict(sorted(((t, s / args.steps) for t, s in spent.get(c, {}).items()),
                                            key=lambda item: -item[1])[:4]) for c in CLASSES},
        }
        print(f"{name}: {wall / args.steps:.3f} s per step", flush=True)
    result = {**report_head("step_profile", started, command, load_before, argparse.Namespace(
        batch_size=args.batch_size, max_rows=args.max_rows, window_seconds=0.0, rounds=1, threads=args.threads),
        steps=args.steps, warmup=args.warmup, inter_op_threads=1, arch=args.arch),
        "rates": rates, "work": work, "variants": variants}
    machine.write_report(args.output, result, markdown(result, machine.machine_facts()), indent=2)
    return result


def markdown(result: dict, facts: dict) -> List[str]:
    """Per variant: each class's seconds per step, its share, its ideal and the ratio ideal / measured."""
    rates = result["rates"]
    model = "Wide & Deep reference" if result["settings"].get("arch") == "widedeep" else "DLRM reference dims"
    lines = [f"Where the training step's time goes, {model}, batch {result['settings']['batch_size']}, "
             f"{machine.run_facts(result['date_utc'], facts)}, {tensorflow_facts(result)}, "
             f"{result['settings']['intra_op_threads']} intra-op threads, {result['settings']['steps']} steps "
             f"recorded. Measured rates: GEMM fp32 {rates['gemm_fp32'] / 1e9:.0f} GFLOP/s, bf16 "
             f"{rates['gemm_bf16'] / 1e9:.0f} GFLOP/s, memory copy {rates['memory'] / 1e9:.1f} GB/s.", "",
             "| variant | class | ms per step | share | ideal ms | ideal / measured | top op types (ms) |",
             "|---|---|---:|---:|---:|---:|---|"]
    for name, variant in result["variants"].items():
        step = variant["step_seconds"]
        rows = [(c, variant["class_seconds"][c]) for c in CLASSES] + [("outside ops", variant["outside_ops_seconds"])]
        for cls, seconds in rows:
            ideal = variant["ideal_seconds"].get(cls)
            tops = ", ".join(f"{t} {s * 1e3:.1f}" for t, s in variant["top_op_types"].get(cls, {}).items())
            lines.append(f"| {name} | {cls} | {seconds * 1e3:.1f} | {seconds / step:.0%} | "
                         + (f"{ideal * 1e3:.1f} | {ideal / seconds:.2f}" if ideal and seconds > 0 else "— | —")
                         + f" | {tops} |")
        lines.append(f"| {name} | **step** | **{step * 1e3:.1f}** | 100% | | | |")
    return lines + ["", f"Command: `{result['command']}`"]


if __name__ == "__main__":
    main()
