"""What bounds the DLRM dot interaction: its parts timed alone, each next to its ideal and its alternatives.

`benchmarks.step_profile` puts the interaction at about a quarter of its ideal (FLOPs at the large-GEMM rate
plus bytes at the copy rate). This benchmark takes it apart at the reference dims (batch 8192, 26 tables and
the bottom vector, dim 128), in fp32 and bf16, 2 intra-op threads:

- the whole interaction, forward and backward, with the embeddings as 26 blocks (one process: one per table)
  and as one block (what the all-to-all gives a rank);
- its batched products alone: the Gram matrix [B, 27, 128] x [B, 128, 27] as `tf.matmul`, as `tf.einsum` and
  XLA-compiled, and the gradient's [B, 27, 27] x [B, 27, 128];
- its copies alone: stacking the 27 vectors, cutting the gradient into 26 blocks (`tf.split`, or one slice
  per table), and a plain elementwise copy of the same bytes.

Each part's ideal is its FLOPs at the machine's GEMM rate ([batch, 1024] x [1024, 1024]) or its bytes read and
written at the rate of a large copy, both measured in the same process; the parts run in alternating windows.

    .venv/bin/python -m benchmarks.interaction_parts    # ~2 minutes
"""
from __future__ import annotations

import argparse
import os
from functools import partial
from typing import Callable, Dict, List, NamedTuple, Optional

import numpy as np
import tensorflow as tf

from benchmarks import machine
from benchmarks.step_profile import gemm_flops_per_second, memory_bytes_per_second
from benchmarks.train_throughput import begin_run, report_head, tensorflow_facts
from dlrm.model.interaction import dot_interaction

TABLES, DIM = 26, 128
VECTORS = TABLES + 1


class Part(NamedTuple):
    """One timed part: what it is, how it runs once, and its FLOPs and bytes moved (what its ideal is made of)."""

    name: str
    run: Callable[[], object]
    flops: float
    bytes_moved: float


def _scalar(tensors) -> tf.Tensor:
    """One number from every output, so that nothing is pruned and no output is copied back."""
    return tf.add_n([tf.reduce_sum(tf.cast(tf.reshape(t, [-1])[:1], tf.float32)) for t in tf.nest.flatten(tensors)])


def _compiled(function: Callable[[], object], jit_compile: bool = False) -> Callable[[], object]:
    return tf.function(lambda: _scalar(function()), jit_compile=jit_compile)


def parts(batch: int, dtype: tf.DType) -> List[Part]:
    rng = np.random.default_rng(0)

    def tensor(*shape):
        return tf.constant(rng.standard_normal(shape), dtype)

    bottom, vectors = tensor(batch, DIM), [tensor(batch, DIM) for _ in range(TABLES)]
    features, gram = tensor(batch, VECTORS, DIM), tensor(batch, VECTORS, VECTORS)
    d_output = tensor(batch, DIM + VECTORS * (VECTORS - 1) // 2)
    element = dtype.size
    stacked_bytes = batch * VECTORS * DIM * element
    product_flops = 2.0 * batch * VECTORS * VECTORS * DIM

    def forward_and_backward(blocks: List[tf.Tensor]) -> Callable[[], object]:
        def run():
            with tf.GradientTape() as tape:
                tape.watch([bottom, *blocks])
                output = dot_interaction(bottom, blocks)
            return tape.gradient(output, [bottom, *blocks], output_gradients=d_output)
        return run

    one_block = tf.concat(vectors, axis=1)
    gradient_blocks = tensor(batch, TABLES, DIM)
    whole = (2 * product_flops, 4 * stacked_bytes)  # the Gram and its gradient's product; stacked in, cut out
    return [
        Part("interaction, 26 blocks (one process)", _compiled(forward_and_backward(vectors)), *whole),
        Part("interaction, 1 block (a rank after the all-to-all)", _compiled(forward_and_backward([one_block])),
             *whole),
        Part("Gram product, tf.matmul", _compiled(lambda: tf.matmul(features, features, transpose_b=True)),
             product_flops, 0.0),
        Part("Gram product, tf.einsum", _compiled(lambda: tf.einsum("bfd,bgd->bfg", features, features)),
             product_flops, 0.0),
        Part("Gram product, XLA", _compiled(lambda: tf.matmul(features, features, transpose_b=True), True),
             product_flops, 0.0),
        Part("gradient product [B,27,27] x [B,27,128]", _compiled(lambda: tf.matmul(gram, features)),
             product_flops, 0.0),
        Part("stack the 27 vectors (concat)", _compiled(lambda: tf.stack([bottom, *vectors], axis=1)),
             0.0, 2 * stacked_bytes),
        Part("cut the gradient into 26 blocks (split)", _compiled(lambda: tf.unstack(gradient_blocks, axis=1)),
             0.0, 2 * stacked_bytes * TABLES / VECTORS),
        Part("cut the gradient into 26 blocks (slices)",
             _compiled(lambda: [gradient_blocks[:, t, :] for t in range(TABLES)]),
             0.0, 2 * stacked_bytes * TABLES / VECTORS),
        Part("plain copy of the stacked bytes", _compiled(lambda: features * tf.constant(2, dtype)),
             0.0, 2 * stacked_bytes),
    ]


def measure(all_parts: List[Part], window_seconds: float, rounds: int) -> Dict[str, List[float]]:
    """Seconds per call of each part, one value per window."""
    for part in all_parts:
        part.run()
    windows = machine.alternate_windows({p.name: partial(machine.repeat_for, window_seconds, p.run)
                                         for p in all_parts}, rounds, rotate=True)
    return {name: [w.wall_seconds / w.value[0] for w in ws] for name, ws in windows.items()}


def markdown(result: dict, facts: dict) -> List[str]:
    rates = result["rates"]
    lines = [f"The DLRM dot interaction's parts, batch {result['settings']['batch_size']}, {TABLES} tables + the "
             f"bottom vector of dim {DIM}, {machine.run_facts(result['date_utc'], facts)}, "
             f"{tensorflow_facts(result)}, {result['settings']['intra_op_threads']} intra-op threads. "
             f"Measured rates: GEMM fp32 {rates['gemm_float32'] / 1e9:.0f} GFLOP/s, bf16 "
             f"{rates['gemm_bfloat16'] / 1e9:.0f} GFLOP/s, memory copy {rates['memory'] / 1e9:.1f} GB/s. "
             f"Best of {result['settings']['rounds']} alternating windows per part.", "",
             "| dtype | part | ms | ideal ms | ideal / measured |", "|---|---|---:|---:|---:|"]
    for dtype, rows in result["dtypes"].items():
        for row in rows:
            lines.append(f"| {dtype} | {row['part']} | {row['seconds'] * 1e3:.1f} | {row['ideal_seconds'] * 1e3:.1f} "
                         f"| {row['ideal_seconds'] / row['seconds']:.2f} |")
    return lines + ["", f"Command: `{result['command']}`"]


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch_size", type=int, default=8192)
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--window_seconds", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--rate_seconds", type=float, default=3.0, help="seconds for each rate (GEMM, memory copy)")
    parser.add_argument("--output", default=os.path.join(machine.RESULTS, "interaction_parts.json"))
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> dict:
    args = parse_args(argv)
    command, started, load_before = begin_run("benchmarks.interaction_parts", argv, args.threads)
    rates = {f"gemm_{d.name}": gemm_flops_per_second(d, args.batch_size, args.rate_seconds)
             for d in (tf.float32, tf.bfloat16)}
    rates["memory"] = memory_bytes_per_second(seconds=args.rate_seconds)
    dtypes = {}
    for dtype in (tf.float32, tf.bfloat16):
        all_parts = parts(args.batch_size, dtype)
        seconds = measure(all_parts, args.window_seconds, args.rounds)
        dtypes[dtype.name] = [
            {"part": p.name, "seconds": min(seconds[p.name]), "windows_seconds": seconds[p.name],
             "ideal_seconds": p.flops / rates[f"gemm_{dtype.name}"] + p.bytes_moved / rates["memory"]}
            for p in all_parts]
    settings = argparse.Namespace(batch_size=args.batch_size, max_rows=0, window_seconds=args.window_seconds,
                                  rounds=args.rounds, threads=args.threads)
    result = {**report_head("interaction_parts", started, command, load_before, settings),
              "rates": rates, "dtypes": dtypes}
    machine.write_report(args.output, result, markdown(result, machine.machine_facts()), indent=2)
    return result


if __name__ == "__main__":
    main()
