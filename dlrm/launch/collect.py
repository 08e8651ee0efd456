"""Gather the runs of a sweep into one table (CSV + markdown) and one plot.

For each `<dir>/<point>/point.json` (written at submission): the trainer's metrics
(`metrics.jsonl`: throughput from the training windows, AUC / log loss of the last evaluation), the
job's wall time (`run.json`), and the model size with its placement: parameters from the last
checkpoint the run logged (its `meta.json`: table sizes, dense shapes), else embedding parameters
from the dataset's table sizes, and the per-rank embedding memory (weights plus optimizer slots) of the planner's plan
for the run's world size and sharding options.
"""
from __future__ import annotations

import csv
import json
import math
import os
import statistics
from dataclasses import replace
from typing import List, Optional, Sequence, Tuple

from dlrm.config import ShardingConfig
from dlrm.features import TableConfig, one_hot_tables
from dlrm.launch.submit import POINT_FILE, RUN_FILE
from dlrm.train.checkpoint.model_shape import saved_model_shape
from dlrm.train.metrics_log import METRICS_FILE, read_metrics

COLUMNS = ("point", "dataset", "frequency_threshold", "embedding_dim", "world_size", "steps",
           "model_parameters", "embedding_parameters", "max_rank_embedding_bytes", "mean_rank_embedding_bytes",
           "samples_per_sec", "auc", "logloss", "wall_seconds", "status")
_BYTES_COLUMNS = ("max_rank_embedding_bytes", "mean_rank_embedding_bytes")
TABLE_FILE = "sweep_results"
PLOT_FILE = "sweep_scaling.png"


def run_tables(config: dict, meta: Optional[dict]) -> Tuple[TableConfig, ...]:
    """The run's embedding tables: from its last checkpoint's model shape, else from its dataset's feature
    contract (its feature spec, or the synthetic preset)."""
    model = config["model"]
    if meta:
        return tuple(TableConfig(t["name"], int(t["rows"]), int(t["dim"]), int(t["hotness"]), t["combiner"],
                                 multi_hot=int(t["hotness"]) > 1) for t in saved_model_shape(meta, [])["tables"])
    data = config["data"]
    from dlrm.data.synthetic.presets import is_widedeep_preset

    if data.get("dataset_dir") or is_widedeep_preset(data.get("synthetic_preset")):
        from dlrm.data.format.contract import contract_from_spec
        from dlrm.data.format.feature_spec import FeatureSpec
        from dlrm.data.synthetic.widedeep_generator import dataset_spec, preset_tables

        spec = (FeatureSpec.load(data["dataset_dir"]) if data.get("dataset_dir")
                else dataset_spec(preset_tables(data["synthetic_preset"])))
        return contract_from_spec(spec, model["embedding_dim"], model.get("combiner", "sum")).tables
    from dlrm.data.synthetic.criteo import preset_cardinalities, preset_hotness

    tables = one_hot_tables(preset_cardinalities(data["synthetic_preset"]), model["embedding_dim"])
    hotness = preset_hotness(data["synthetic_preset"])
    return tuple(sorted((replace(t, hotness=h, multi_hot=h > 1) for t, h in zip(tables, hotness)),
                        key=lambda t: t.multi_hot))


def placement_memory(config: dict, tables: Sequence[TableConfig], world_size: int) -> dict:
    """Per-rank embedding memory (bytes) of the planner's placement for this run."""
    from dlrm.embedding.optimizer_slots import slots_for_optimizer
    from dlrm.embedding.planner import plan_embeddings

    fields = {k: v for k, v in config["sharding"].items() if k in ShardingConfig.__dataclass_fields__}
    plan = plan_embeddings(tables, world_size, ShardingConfig(**fields),
                           optimizer_slots=slots_for_optimizer(config["optimizer"]["optimizer"]))
    return plan.memory_spread()


def checkpoint_meta(records: List[dict]) -> Optional[dict]:
    """meta.json of the last checkpoint the run logged (a `checkpoint` record in metrics.jsonl)."""
    paths = [r["path"] for r in records if r.get("kind") == "checkpoint" and r.get("path")]
    meta_path = os.path.join(paths[-1], "meta.json") if paths else None
    if meta_path is None or not os.path.exists(meta_path):
        return None
    try:
        with open(meta_path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except (OSError, ValueError):  # damaged: the run's row is collected without its checkpoint's figures
        return None
    return meta if isinstance(meta, dict) else None


def dense_parameters(dense_shapes: dict) -> int:
    """Weights among a checkpoint's dense arrays: optimizer slots (`<weight key>.<slot>`) and
    optimizer counters are left out."""
    keys = set(dense_shapes)
    weights = [k for k in keys if not k.startswith("optimizer.")
               and not any(k.startswith(other + ".") for other in keys if other != k)]
    return sum(math.prod(dense_shapes[k]) for k in weights)


def _throughput(train_records: List[dict]) -> Optional[float]:
    """Median samples/s over the logged windows, leaving out the first (graph tracing, warm-up)."""
    values = [r["samples_per_sec"] for r in train_records if isinstance(r.get("samples_per_sec"), (int, float))]
    if len(values) > 1:
        values = values[1:]
    return statistics.median(values) if values else None


def collect_point(point_dir: str) -> dict:
    with open(os.path.join(point_dir, POINT_FILE)) as f:
        point_file = json.load(f)
    point, config = point_file["point"], point_file["config"]
    row = {"point": point["name"], "dataset": point["dataset"]["name"],
           "frequency_threshold": point["dataset"].get("frequency_threshold", ""),
           "embedding_dim": config["model"]["embedding_dim"], "world_size": point["world_size"]}
    metrics_path = os.path.join(point_dir, METRICS_FILE)
    records = read_metrics(metrics_path) if os.path.exists(metrics_path) else []
    meta = checkpoint_meta(records)
    tables = run_tables(config, meta)
    memory = placement_memory(config, tables, point["world_size"])
    row["embedding_parameters"] = sum(t.rows * t.dim for t in tables)
    row["model_parameters"] = row["embedding_parameters"] + dense_parameters(meta["dense_shapes"]) if meta else None
    row["max_rank_embedding_bytes"] = memory["max_bytes"]
    row["mean_rank_embedding_bytes"] = int(memory["mean_bytes"])
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval" and isinstance(r.get("auc"), (int, float))]
    row["steps"] = max((r["step"] for r in train), default="")
    row["samples_per_sec"] = _throughput(train)
    row["auc"] = evals[-1]["auc"] if evals else None
    row["logloss"] = evals[-1].get("logloss") if evals else None
    run_path = os.path.join(point_dir, RUN_FILE)
    if os.path.exists(run_path):
        with open(run_path) as f:
            run = json.load(f)
        row["wall_seconds"] = run.get("wall_seconds")
        row["status"] = "ok" if run.get("returncode") == 0 else f"exit {run.get('returncode')}"
    else:
        row["wall_seconds"] = None
        row["status"] = "not finished"
    return row


def find_points(sweep_dir: str) -> List[str]:
    return sorted(os.path.join(sweep_dir, name) for name in os.listdir(sweep_dir)
                  if os.path.isfile(os.path.join(sweep_dir, name, POINT_FILE)))


def _fmt(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:.1f}"
        return f"{value:.4f}"
    if isinstance(value, int) and abs(value) >= 10000:
        return f"{value:,}"
    return str(value)


def write_markdown(rows: List[dict], path: str) -> None:
    from dlrm.sizes import format_bytes

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        cells = [format_bytes(row[c]) if c in _BYTES_COLUMNS else _fmt(row.get(c)) for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def write_csv(rows: List[dict], path: str) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: "" if row.get(c) is None else row.get(c) for c in COLUMNS})


def write_plot(rows: List[dict], path: str) -> None:
    """Throughput and AUC against embedding parameters, one line per (dataset, world size)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (speed_ax, auc_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    series = sorted({(r["dataset"], r["world_size"]) for r in rows})
    for dataset, world in series:
        group = sorted((r for r in rows if (r["dataset"], r["world_size"]) == (dataset, world)),
                       key=lambda r: r["embedding_parameters"])
        label = f"{dataset}, {world} rank{'s' if world > 1 else ''}"
        speed = [(r["embedding_parameters"], r["samples_per_sec"]) for r in group if r["samples_per_sec"]]
        auc = [(r["embedding_parameters"], r["auc"]) for r in group if r["auc"] is not None]
        if speed:
            speed_ax.plot(*zip(*speed), marker="o", label=label)
        if auc:
            auc_ax.plot(*zip(*auc), marker="o", label=label)
    for ax, ylabel in ((speed_ax, "training throughput (samples/s)"), (auc_ax, "eval AUC")):
        ax.set_xscale("log")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.set_xlabel("embedding parameters")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if series:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def collect(sweep_dir: str) -> dict:
    """Write `<dir>/sweep_results.{csv,md}` and `<dir>/sweep_scaling.png`; returns their paths and rows."""
    points = find_points(sweep_dir)
    if not points:
        raise FileNotFoundError(f"{sweep_dir}: no run directories with {POINT_FILE} (is this a sweep directory?)")
    rows = sorted((collect_point(p) for p in points),
                  key=lambda r: (r["dataset"], r["world_size"], r["embedding_parameters"]))
    paths = {"csv": os.path.join(sweep_dir, TABLE_FILE + ".csv"),
             "markdown": os.path.join(sweep_dir, TABLE_FILE + ".md"),
             "plot": os.path.join(sweep_dir, PLOT_FILE)}
    write_csv(rows, paths["csv"])
    write_markdown(rows, paths["markdown"])
    write_plot(rows, paths["plot"])
    return {"rows": rows, **paths}
