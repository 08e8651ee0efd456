"""Scaling benchmark: samples/s and the share of step time spent in all-to-all and allreduce.

World sizes 1 and 2 on this machine at one fixed global batch, both with the trainer's real step
(`dlrm.train.step.make_train_step`): world 1 uses `LocalEmbedding`, world 2 the hybrid-parallel
`DistributedEmbedding` (tables placed by the planner) over Horovod/Gloo. Cores are split, not
multiplied: world 1 runs 2 intra-op threads, each of the 2 ranks runs 1 (the machine has 2 cores).

Collective time comes from Horovod's own timeline (HOROVOD_TIMELINE, written by rank 0): inside the
timed windows we take the wall time covered by the execution phases of ALLTOALL ops, of
ALLREDUCE/ALLGATHER ops (gradient averaging, replicated-table gradients, the logged loss), and by
any Horovod phase at all including NEGOTIATE (a tensor waiting until every rank has submitted it:
synchronisation and load imbalance). Overlapping tensors are counted once (interval union). Shares
are relative to the wall time of the same windows.

Models (`--model`): `tiny` (default: the embedded demo's tiny preset, dim 16, global batch 4096) or
`reference` (the reference DLRM dims: dim 128, bottom 512-256-128, top 1024-1024-512-256-1, global
batch 8192, t15-shaped tables capped at 200k rows) or `reference_multihot` (the same dims on the MLPerf
DLRM-DCNv2 multi-hot hotness, Criteo 1TB tables capped at 200k rows).

Usage (driver: generates data, alternates world sizes, writes JSON + markdown):
    .venv/bin/python -m benchmarks.scaling [--model tiny|reference|reference_multihot] [--rounds 2]
        [--windows 3] [--window_seconds 5] [--backends horovod,mpi]
The driver runs each world size `--rounds` times, alternating (1, 2, 1, 2, ...), and reports medians.
With `--backends horovod,mpi` each round runs world 2 once per backend (the MPI backend under plain
`mpirun`). The MPI backend has no timeline: it times its own collectives on every rank
(`ProcessGroup.collective_seconds`), and the report adds where each rank's step time goes (compute,
all-to-all, the other collectives, and the part of them spent waiting for peers).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from benchmarks.machine import ROOT, cpu_flags

RESULTS = Path(ROOT, "benchmarks", "results")
REFERENCE_MAX_ROWS = 200_000  # t15-shaped tables capped so that two ranks fit next to other jobs


@dataclass(frozen=True)
class BenchModel:
    """One benchmarked model: its dims (main.py flags), tables and global batch."""

    name: str
    embedding_dim: int
    bottom_mlp: str
    top_mlp: str
    global_batch: int
    train_rows: int
    preset: str
    max_rows: Optional[int] = None

    def hotness(self) -> list:
        from dlrm.data.synthetic.criteo import preset_hotness

        return list(preset_hotness(self.preset))

    def cardinalities(self) -> list:
        from dlrm.data.synthetic.criteo import preset_cardinalities

        return preset_cardinalities(self.preset, max_rows=self.max_rows)


MODELS = {
    "tiny": BenchModel("tiny", 16, "64-32-16", "256-128-1", 4096, 65536, "tiny"),
    "reference": BenchModel("reference", 128, "512-256-128", "1024-1024-512-256-1", 8192, 8 * 8192, "t15",
                            REFERENCE_MAX_ROWS),
    # The same dims on the MLPerf DLRM-DCNv2 multi-hot hotness (Criteo 1TB tables, capped alike).
    "reference_multihot": BenchModel("reference_multihot", 128, "512-256-128", "1024-1024-512-256-1", 8192,
                                     8 * 8192, "mlperf", REFERENCE_MAX_ROWS),
}


def model_flags(dataset: str, threads: int, model: BenchModel) -> list:
    """`model`'s main.py flags with plain SGD, at its fixed global batch."""
    return ["--dataset_path", dataset, "--embedding_dim", str(model.embedding_dim),
            "--bottom_mlp_dims", model.bottom_mlp, "--top_mlp_dims", model.top_mlp, "--optimizer", "sgd",
            "--learning_rate", "0.1", "--warmup_steps", "0", "--decay_steps", "0",
            "--global_batch_size", str(model.global_batch), "--intra_op_threads", str(threads),
            "--run_dir", tempfile.mkdtemp(prefix="scaling_run_")]


# -------------------------------------------------------------------------------- timeline
_EVENT = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)?\}")


def _union_seconds(intervals: list) -> float:
    """Length of the union of [t0, t1) intervals (concurrent tensors are not double counted)."""
    total, end = 0.0, None
    for t0, t1 in sorted(intervals):
        if end is None or t0 > end:
            total += t1 - t0
            end = t1
        elif t1 > end:
            total += t1 - end
            end = t1
    return total / 1e6


def collective_seconds(timeline_path: str, begin_us: float, end_us: float) -> dict:
    """Wall seconds inside [begin_us, end_us) (epoch microseconds) during which Horovod was executing
    an all-to-all, executing an allreduce/allgather, or doing anything at all (incl. negotiation)."""
    text = Path(timeline_path).read_text()
    start = None
    stacks: dict = {}
    intervals = {"alltoall": [], "allreduce": [], "any_collective": []}
    for raw in _EVENT.findall(text):
        try:
            event = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if event.get("name") == "process_name" and "start_time_since_epoch_in_micros" in event.get("args", {}):
            start = event["args"]["start_time_since_epoch_in_micros"]
            continue
        if start is None or event.get("ph") not in ("B", "E"):
            continue
        stack = stacks.setdefault(event["pid"], [])
        if event["ph"] == "B":
            stack.append((event["name"], event["ts"]))
            continue
        if not stack:
            continue
        name, began = stack.pop()
        if stack:  # nested phase (e.g. GLOO_ALLREDUCE inside ALLREDUCE): covered by its parent
            continue
        t0, t1 = max(start + began, begin_us), min(start + event["ts"], end_us)
        if t1 <= t0:
            continue
        intervals["any_collective"].append((t0, t1))
        if name == "ALLTOALL":
            intervals["alltoall"].append((t0, t1))
        elif name in ("ALLREDUCE", "ALLGATHER", "BROADCAST", "REDUCESCATTER"):
            intervals["allreduce"].append((t0, t1))
    return {key: _union_seconds(value) for key, value in intervals.items()}


# -------------------------------------------------------------------------------- worker
def worker(dataset: str, model: BenchModel, windows: int, window_seconds: float, out: str,
           extra_flags: Sequence[str] = ()) -> None:
    import numpy as np

    from dlrm import dist
    from dlrm.cli import parse_config
    from dlrm.train.build import build_parts, configure_tensorflow, make_reader
    from dlrm.train.ids_ahead import StepBatches
    from dlrm.train.step import make_train_step

    world = dist.launcher_world().size
    config = parse_config(model_flags(dataset, 2 // world, model) + list(extra_flags))
    configure_tensorflow(config.train)
    group = dist.start()
    parts = build_parts(config, dataset, group, with_optimizer=True)
    # The training loop's batches (decoded once here and cycled): with the MPI backend each batch's ids
    # travel during the step before it, as in training (`dlrm.train.ids_ahead`).
    batches = StepBatches(itertools.cycle(list(make_reader(parts, "train", model.global_batch,
                                                           partial_batch="drop"))), parts)
    train_step = make_train_step(parts, ids_received=batches.ids_ahead)

    def step():
        batch, ids_received = next(batches)
        with batches.next_ids_ahead():
            return train_step(batch.numerical, batch.categorical, batch.label, np.float32(batch.global_rows),
                              np.int64(batch.first_row), *ids_received).numpy()

    for _ in range(3):  # warm-up: tracing, first allocations
        step()
    began = time.time()
    for _ in range(3):
        step()
    # Every rank must run the same number of steps (each step is collective): rank 0 decides.
    steps_per_window = group.broadcast_object(max(1, round(window_seconds / ((time.time() - began) / 3))),
                                              root_rank=0, name="steps_per_window")
    records, clocks = [], []
    for _ in range(windows):
        group.barrier()
        began, clock_before = time.time(), group.collective_seconds()
        for _ in range(steps_per_window):
            step()
        group.barrier()
        ended, clock_after = time.time(), group.collective_seconds()
        steps = steps_per_window
        records.append({"begin_us": began * 1e6, "end_us": ended * 1e6, "steps": steps,
                        "samples_per_sec": steps * model.global_batch / (ended - began)})
        if clock_after is not None:
            clocks.append(clock_shares(clock_before or {}, clock_after, ended - began))
    if clocks:  # the backend timed its collectives on every rank: each rank writes its own
        Path(f"{out}.rank{group.rank}").write_text(json.dumps(clocks))
    if group.rank == 0:
        plan = parts.plan
        Path(out).write_text(json.dumps({"world_size": group.size, "windows": records,
                                         "plan_kinds": [t.kind for t in plan.tables] if plan else None}))


def clock_shares(before: dict, after: dict, wall: float) -> dict:
    """One rank's shares of a window's wall time from the backend's collective clock (`collective_seconds`):
    all-to-all, the other collectives, and the part of both spent waiting for peers; compute is the rest."""
    def spent(kinds, field):
        return sum(getattr(after[k], field) - (getattr(before[k], field) if k in before else 0.0)
                   for k in kinds if k in after)

    others = [k for k in after if k != "alltoall"]
    shares = {"alltoall": spent(["alltoall"], "seconds") / wall, "allreduce": spent(others, "seconds") / wall,
              "waiting": spent(list(after), "waiting") / wall}
    shares["compute"] = 1.0 - shares["alltoall"] - shares["allreduce"]
    return shares


# -------------------------------------------------------------------------------- driver
def run_world(world: int, dataset: str, args, backend: str = "horovod") -> dict:
    scratch = tempfile.mkdtemp(prefix=f"scaling_w{world}_{backend}_")
    out = os.path.join(scratch, "result.json")
    timeline = os.path.join(scratch, "timeline.json")
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", HOROVOD_TIMELINE=timeline,
               HOROVOD_STALL_CHECK_TIME_SECONDS="5", HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="30")
    command = [sys.executable, "-m", "benchmarks.scaling", "--worker", dataset, "--model", args.model,
               "--windows", str(args.windows), "--window_seconds", str(args.window_seconds), "--out", out]
    if world > 1 and backend == "mpi_in_step":
        command.append("--exchange_ids_in_step")
    if world > 1 and backend.startswith("mpi"):  # no HOROVOD_* variable: the process group's auto picks MPI
        env = {key: value for key, value in env.items() if not key.startswith("HOROVOD_")}
        root = ["--allow-run-as-root"] if os.geteuid() == 0 else []
        command = ["mpirun", "-np", str(world), "--oversubscribe", *root, *command]
    elif world > 1:
        command = [str(Path(sys.executable).parent / "horovodrun"), "-np", str(world), "-H",
                   f"localhost:{world}", "--gloo", *command]
    subprocess.run(command, cwd=ROOT, env=env, check=True, timeout=600,
                   stdout=subprocess.DEVNULL if not args.verbose else None)
    result = json.loads(Path(out).read_text())
    result["backend"] = backend if world > 1 else "none"
    # [rank][window] -> shares, where the backend timed its collectives on every rank (MPI)
    timed = [os.path.exists(f"{out}.rank{r}") for r in range(world)]
    assert all(timed) or not any(timed), f"only some ranks wrote their collective clock: {timed}"
    result["rank_shares"] = [json.loads(Path(f"{out}.rank{r}").read_text()) for r in range(world) if timed[r]]
    for index, record in enumerate(result["windows"]):
        wall = (record["end_us"] - record["begin_us"]) / 1e6
        if os.path.exists(timeline):
            seconds = collective_seconds(timeline, record["begin_us"], record["end_us"])
            record.update({f"{k}_share": v / wall for k, v in seconds.items()})
        elif result["rank_shares"]:  # rank 0's clock, as Horovod's timeline is rank 0's
            own = result["rank_shares"][0][index]
            record.update(alltoall_share=own["alltoall"], allreduce_share=own["allreduce"],
                          any_collective_share=own["alltoall"] + own["allreduce"])
        else:
            record.update(alltoall_share=None, allreduce_share=None, any_collective_share=None)
    return result


def _median(values: list) -> Optional[float]:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def summarise(runs: list) -> list:
    rows = []
    for world, backend in sorted({(r["world_size"], r.get("backend", "horovod")) for r in runs}):
        mine = [r for r in runs if (r["world_size"], r.get("backend", "horovod")) == (world, backend)]
        windows = [w for r in mine for w in r["windows"]]
        rows.append({
            "world_size": world,
            "backend": backend,
            "windows": len(windows),
            "samples_per_sec": statistics.median(w["samples_per_sec"] for w in windows),
            "alltoall_share": _median([w["alltoall_share"] for w in windows]),
            "allreduce_share": _median([w["allreduce_share"] for w in windows]),
            "any_collective_share": _median([w["any_collective_share"] for w in windows]),
            "plan_kinds": mine[0]["plan_kinds"],
            "rank_shares": [{key: statistics.median(w[key] for r in mine for w in r["rank_shares"][rank])
                             for key in RANK_SHARES} for rank in range(world)] if mine[0].get("rank_shares") else [],
        })
    return rows


RANK_SHARES = ("compute", "alltoall", "allreduce", "waiting")


def _share(value: Optional[float]) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def markdown(rows: list, meta: dict) -> str:
    base = rows[0]["samples_per_sec"]
    lines = [f"Scaling of the {meta['model']} model at global batch {meta['global_batch']} ({meta['date']}, "
             f"{meta['machine']}); "
             f"command: `{meta['command']}`", "",
             "| world size | backend | samples/s (median) | vs world 1 | all-to-all share | allreduce share | "
             "any collective (Horovod: incl. negotiation) | windows |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['world_size']} | {row['backend']} | {row['samples_per_sec']:,.0f} | "
                     f"{row['samples_per_sec'] / base:.2f}x | {_share(row['alltoall_share'])} | "
                     f"{_share(row['allreduce_share'])} | {_share(row['any_collective_share'])} | {row['windows']} |")
    timed = [row for row in rows if row["rank_shares"]]
    if timed:
        lines += ["", "Where each rank's step time goes (MPI backend: its own clock of every collective; medians over "
                  "the windows; waiting: inside a collective before the last peer's data arrived):", "",
                  "| world size | backend | rank | compute | all-to-all | allreduce, allgather, the windows' barrier | "
                  "of which waiting |", "|---|---|---|---|---|---|---|"]
        for row in timed:
            for rank, shares in enumerate(row["rank_shares"]):
                lines.append(f"| {row['world_size']} | {row['backend']} | {rank} | {_share(shares['compute'])} | "
                             f"{_share(shares['alltoall'])} | {_share(shares['allreduce'])} | "
                             f"{_share(shares['waiting'])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", metavar="DATASET")
    parser.add_argument("--out")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--window_seconds", type=float, default=5.0)
    parser.add_argument("--model", choices=sorted(MODELS), default="tiny")
    parser.add_argument("--backends", default="horovod",
                        help="process-group backends of the 2-rank runs, comma-separated: horovod, mpi, "
                             "mpi_in_step (MPI with --exchange_ids_in_step)")
    parser.add_argument("--exchange_ids_in_step", action="store_true", help="worker: the trainer's flag")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, MODELS[args.model], args.windows, args.window_seconds, args.out,
               ["--exchange_ids_in_step"] if args.exchange_ids_in_step else [])
        return
    from dlrm.data.synthetic.generator import generate_dataset

    model = MODELS[args.model]
    dataset = tempfile.mkdtemp(prefix="scaling_data_")
    generate_dataset(dataset, model.cardinalities(), model.train_rows, 1024, seed=7, hotness=model.hotness())
    runs = []
    for _ in range(args.rounds):
        runs.append(run_world(1, dataset, args))  # alternating, so machine noise hits all alike
        for backend in args.backends.split(","):
            runs.append(run_world(2, dataset, args, backend))
    rows = summarise(runs)
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "machine": f"{os.cpu_count()} cores, CPU flags {cpu_flags()}, shared with other jobs",
            "command": " ".join(["python", "-m", "benchmarks.scaling", *sys.argv[1:]]),
            "model": model.name, "global_batch": model.global_batch}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = ("scaling" if model.name == "tiny" else f"scaling_{model.name}") + \
        ("" if args.backends == "horovod" else "_" + args.backends.replace(",", "_"))
    (RESULTS / f"{stem}.json").write_text(json.dumps({"meta": meta, "summary": rows, "runs": runs}, indent=1))
    table = markdown(rows, meta)
    (RESULTS / f"{stem}.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
