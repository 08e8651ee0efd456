"""Sweeps of training runs (model-size scaling experiments) through submitit: `python -m dlrm.launch`.

`spec` reads the YAML grid, `submit` submits one job per point (Slurm or local) and waits with a
deadline, `slurm_state` asks slurmctld for job states (no accounting needed), `collect` turns the
finished runs into a table and a plot. See docs/cluster.md.
"""
