"""Serving latency: the exported SavedModel's signature vs the trainer's own predict step, same weights,
same test rows, batch 1, 64 and 4096, in one process on this CPU.

Without --checkpoint, a small DLRM (the demo dims: 26 tables of the tiny preset, embedding dim 16,
bottom 64-32-16, top 256-128-1) is trained for a few steps on a synthetic dataset under --work, then
exported with `python -m dlrm.export`. Each batch size runs rounds that alternate the two variants
(`--calls` timed calls each, after warm-up calls), so machine noise hits both alike; the report gives
p50 and p99 of the per-call latency over every round.

    python -m benchmarks.serving [--checkpoint DIR --dataset_path DIR] [--rounds 5] [--calls 40]

Writes benchmarks/results/serving.json and benchmarks/results/serving.md.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import Callable, Dict, Optional

import numpy as np
import tensorflow as tf

from benchmarks.machine import RESULTS, ROOT, command_line, machine_facts, run_facts, utc_now, write_json, write_table
from dlrm.data.format.contract import contract_from_spec
from dlrm.data.reader.reader import BatchReader
from dlrm.export.inputs import ServingLayout
from dlrm.export.source import load_source
from dlrm.train.build import serving_parts
from dlrm.train.checkpoint.restore import restore
from dlrm.train.step import make_predict_step

BATCHES = (1, 64, 4096)
TRAIN_FLAGS = ["--synthetic_train_rows", "65536", "--synthetic_test_rows", "8192", "--max_steps", "20",
               "--intra_op_threads", "2", "--log_every", "10", "--eval_every", "1000"]


def parse_args(argv: Optional[list]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", default=None, help="checkpoint to serve (default: train a small one)")
    parser.add_argument("--dataset_path", default=None, help="its dataset (default: the one it names)")
    parser.add_argument("--work", default=os.path.join(ROOT, "data", "bench_serving"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=40, help="timed calls per variant, batch size and round")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="TensorFlow intra-op threads")
    parser.add_argument("--out", default=RESULTS)
    return parser.parse_args(argv)


def _python(*argv: str) -> None:
    subprocess.run([sys.executable, *argv], cwd=ROOT, check=True, env=dict(os.environ, PYTHONPATH=ROOT))


def prepare(args: argparse.Namespace) -> tuple:
    """(checkpoint, dataset directory, SavedModel directory)."""
    checkpoint, dataset = args.checkpoint, args.dataset_path
    if checkpoint is None:
        checkpoint, dataset = os.path.join(args.work, "ckpt"), os.path.join(args.work, "data")
        if not os.path.exists(checkpoint):
            _python("main.py", "--synthetic_dir", dataset, "--run_dir", os.path.join(args.work, "run"),
                    "--save_checkpoint_path", checkpoint, *TRAIN_FLAGS)
    served = os.path.join(args.work, "served")
    _python("-m", "dlrm.export", "--checkpoint", checkpoint, "--out", served, "--overwrite",
            *(["--dataset_path", dataset] if dataset else []))
    return checkpoint, dataset, served


def timed_calls(call: Callable[[], object], calls: int) -> list:
    out = []
    for _ in range(calls):
        begin = time.perf_counter()
        call()
        out.append(1000 * (time.perf_counter() - begin))
    return out


def main(argv: Optional[list] = None) -> dict:
    args = parse_args(argv)
    checkpoint, dataset, served = prepare(args)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    source = load_source(checkpoint, dataset)
    parts = serving_parts(source.config, source.spec)
    restore(parts, source.directory, training=False, verified=True)  # load_source verified it
    predict_step = make_predict_step(parts.model)
    layout = ServingLayout(contract_from_spec(source.spec, source.config.model.embedding_dim,
                                              source.config.model.combiner))
    serve = tf.saved_model.load(served).signatures["serving_default"]
    reader = BatchReader(source.spec, "test", max(BATCHES), rank=0, world_size=1, prefetch=0)
    batch = next(iter(reader))
    latencies: Dict[str, Dict[int, list]] = {"saved_model": {}, "trainer_predict_step": {}}
    for size in BATCHES:
        numerical, categorical = batch.numerical[:size], batch.categorical[:size]
        served_inputs = {k: tf.constant(v) for k, v in layout.from_batch(numerical, categorical).items()}
        trainer_inputs = (tf.constant(numerical, tf.float32), tf.constant(categorical, tf.int32))
        variants = {"saved_model": lambda: serve(**served_inputs)["probability"].numpy(),
                    "trainer_predict_step": lambda: predict_step(*trainer_inputs).numpy()}
        for name, call in variants.items():
            timed_calls(call, args.warmup)
            latencies[name][size] = []
        for _ in range(args.rounds):
            for name, call in variants.items():
                latencies[name][size] += timed_calls(call, args.calls)
    figures = {name: {str(size): {"p50_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)),
                                  "calls": len(v)} for size, v in by_size.items()}
               for name, by_size in latencies.items()}
    load = os.getloadavg()
    where = os.path.relpath(source.directory, ROOT)
    result = {"date": utc_now(), "machine": machine_facts(), "command": command_line("benchmarks.serving", argv),
              "checkpoint": where, "arch": source.config.model.arch, "threads": args.threads,
              "load_average_1m_at_end": load[0], "figures": figures,
              "note": "shared machine: other jobs ran on the same cores during the measurement"}
    write_json(os.path.join(args.out, "serving.json"), result, indent=1)
    lines = [f"# Serving latency ({run_facts(utc_now(minutes=True), result['machine'])})", "",
             f"{source.config.model.arch} from {where}, {args.threads} TensorFlow threads, "
             f"{args.rounds} alternating rounds x {args.calls} calls; shared machine (1-minute load average "
             f"{load[0]:.1f} at the end). Milliseconds per call.", "",
             "| batch | SavedModel p50 | SavedModel p99 | trainer predict step p50 | trainer predict step p99 |",
             "|---:|---:|---:|---:|---:|"]
    for size in BATCHES:
        s, t = figures["saved_model"][str(size)], figures["trainer_predict_step"][str(size)]
        lines.append(f"| {size} | {s['p50_ms']:.3f} | {s['p99_ms']:.3f} | {t['p50_ms']:.3f} | {t['p99_ms']:.3f} |")
    write_table(os.path.join(args.out, "serving.md"), lines)
    return result


if __name__ == "__main__":
    main()
