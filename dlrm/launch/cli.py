"""`python -m dlrm.launch --sweep spec.yaml [...]` submits a sweep; `--collect DIR` tabulates it (`dlrm-launch`)."""
from __future__ import annotations

import argparse
import logging
import os
from typing import Optional, Sequence

from dlrm.argtypes import (
    ArgumentParser,
    add_debug_flag,
    command_line,
    count,
    positive_int,
    positive_number,
    refuse_unless,
)
from dlrm.launch.spec import SpecError, SweepError, load_spec


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog="python -m dlrm.launch",
        description="Submit a sweep of training runs (one submitit job per grid point) or collect the "
                    "results of one into a CSV/markdown table and a plot.")
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--sweep", metavar="SPEC.yaml", help="sweep spec to submit (see examples/sweep_*.yaml)")
    what.add_argument("--collect", metavar="DIR", help="sweep directory to tabulate and plot")
    parser.add_argument("--out", metavar="DIR", help="sweep directory (default: runs/sweeps/<spec name>)")
    parser.add_argument("--executor", choices=["slurm", "local"], default="slurm",
                        help="slurm: sbatch through submitit; local: processes on this machine (default: slurm)")
    parser.add_argument("--partition", help="Slurm partition (default: the cluster's default)")
    parser.add_argument("--tasks_per_node", type=positive_int, default=1,
                        help="ranks per node; nodes = world size / this (default 1; GPU nodes: GPUs per node)")
    parser.add_argument("--gpus_per_node", type=count, default=0, help="GPUs to request per node (default 0)")
    parser.add_argument("--cpus_per_task", type=positive_int, help="CPUs per rank")
    parser.add_argument("--timeout_min", type=positive_int, default=60,
                        help="time limit of each job, minutes (default 60)")
    parser.add_argument("--srun_mpi", choices=["pmix", "pmi2"], default="pmix",
                        help="srun MPI plugin matching the MPI Horovod was built with (default pmix)")
    parser.add_argument("--no_wait", action="store_true", help="print the job ids and return at once")
    parser.add_argument("--wait_timeout", type=positive_number,
                        help="seconds to wait for all jobs (default: twice --timeout_min); never waits forever")
    add_debug_flag(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    from dlrm.cli_errors import run_main

    return run_main(sweep_or_collect, argv)


# The flags of a submission, and of a submission to Slurm.
SUBMIT_FLAGS = ("--out", "--executor", "--no_wait", "--wait_timeout", "--timeout_min")
SLURM_FLAGS = ("--partition", "--tasks_per_node", "--gpus_per_node", "--cpus_per_task", "--srun_mpi")


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """The flags, a typed flag that would change nothing refused."""
    parser, argv = build_parser(), command_line(argv)
    args = parser.parse_args(argv)
    refuse_unless(parser, argv, not args.collect, SUBMIT_FLAGS + SLURM_FLAGS, "not used by --collect (it applies "
                  "to --sweep)")
    refuse_unless(parser, argv, args.executor == "slurm", SLURM_FLAGS, "not used by --executor local (one process "
                  "on this machine starts the ranks)")
    refuse_unless(parser, argv, not args.no_wait, ("--wait_timeout",), "not used with --no_wait")
    return args


def sweep_or_collect(argv: Sequence[str]) -> int:
    args = parse_args(argv)
    if args.collect:
        from dlrm.launch.collect import collect

        try:
            result = collect(args.collect)
        except FileNotFoundError as error:
            raise SweepError(str(error)) from None
        with open(result["markdown"]) as f:
            print(f.read(), end="")
        print(f"wrote {result['csv']}, {result['markdown']}, {result['plot']}")
        return 0

    from dlrm.launch.submit import ExecutorOptions, submit_sweep, wait_for_jobs

    spec = load_spec(args.sweep)
    options = ExecutorOptions(executor=args.executor, partition=args.partition, tasks_per_node=args.tasks_per_node,
                              gpus_per_node=args.gpus_per_node, cpus_per_task=args.cpus_per_task,
                              timeout_min=args.timeout_min, srun_mpi=args.srun_mpi)
    sweep_dir = args.out or os.path.join("runs", "sweeps", spec.name)
    try:
        submitted = submit_sweep(spec, sweep_dir, options)
    except ValueError as error:
        raise SpecError(f"{args.sweep}: {error}") from None
    for item in submitted:
        print(f"{item.point.name}\tjob {item.job.job_id}\t{item.point_dir}", flush=True)
    if args.no_wait:
        print(f"submitted {len(submitted)} jobs; later: python -m dlrm.launch --collect {sweep_dir}")
        return 0
    # Without accounting every submitit status poll warns that sacct failed; job states come from
    # scontrol in wait_for_jobs instead, so those warnings are noise.
    logging.getLogger("submitit").setLevel(logging.ERROR)
    outcomes = wait_for_jobs({item.point.name: item.job for item in submitted},
                             args.wait_timeout or 2 * 60 * args.timeout_min)
    for name, outcome in outcomes.items():
        print(f"{name}\t{outcome}")
    failed = [name for name, outcome in outcomes.items() if outcome != "COMPLETED"]
    print(f"{len(outcomes) - len(failed)}/{len(outcomes)} runs completed; "
          f"tabulate: python -m dlrm.launch --collect {sweep_dir}")
    return 1 if failed else 0

