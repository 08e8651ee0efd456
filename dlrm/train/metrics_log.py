"""What a run tells its user: JSON-lines metrics, progress output, TensorBoard, and a final plot.

`<run_dir>/metrics.jsonl`   one JSON object per line: {"kind": "train"|"eval"|..., "step": ..., ...}
`<run_dir>/tensorboard/`    scalar summaries (train/loss, train/lr, train/samples_per_sec, eval/auc, ...)
`<run_dir>/metrics.png`     loss, AUC and MAP@12 (if measured) over steps (written by `close()`)

Progress goes to a tqdm bar on an interactive terminal and to plain periodic lines otherwise (logs
of batch jobs stay readable), also under a launcher such as mpirun, which forwards a pseudo-terminal.
Only the primary rank logs: other ranks get a disabled logger, and holds `<run_dir>/run.lock` (one run
at a time writes a run directory). A training run records whose records the directory holds
(`records.json`: its checkpoint root). A resumed run appends to its own records (readers keep the last
record per (kind, step)); any other training run first moves the records there to
`<run_dir>/earlier/<time of the last one>/`: two training runs' records never mix, none is lost.
Evaluations and the inference benchmark append to the records of the run they read.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, Dict, List, Optional, TextIO

from dlrm.atomic import describe_os_error, write_text_atomically
from dlrm.dir_lock import DirLock
from dlrm.errors import PathError
from dlrm.train.eval_result import BayesOptimal, EvalMetrics, progress_text

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "metrics.png"
TENSORBOARD_DIR = "tensorboard"
OWNER_FILE = "records.json"
LOCK_FILE = "run.lock"
EARLIER_DIR = "earlier"
RECORDS = (METRICS_FILE, PLOT_FILE, TENSORBOARD_DIR, OWNER_FILE)  # what one run writes into its run directory


def records_owner(run_dir: str) -> Optional[str]:
    """The checkpoint root of the training run whose records `run_dir` holds ("": one without checkpoints);
    None: not recorded (no training run yet, or one of an older version)."""
    try:
        with open(os.path.join(run_dir, OWNER_FILE), encoding="utf-8") as f:
            owner = json.load(f).get("checkpoints")
    except (OSError, ValueError, AttributeError):
        return None
    return owner if isinstance(owner, str) else None


def move_earlier_records(run_dir: str) -> Optional[str]:
    """Move the records of an earlier run in `run_dir` to `run_dir/earlier/<UTC time of its last record>/`;
    returns that directory (None: there were none)."""
    found = [name for name in RECORDS if os.path.exists(os.path.join(run_dir, name))]
    if not found:
        return None
    last = max(os.path.getmtime(os.path.join(run_dir, name)) for name in found)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(last))
    target = os.path.join(run_dir, EARLIER_DIR, stamp)
    suffix = 1
    while os.path.exists(target):
        suffix += 1
        target = os.path.join(run_dir, EARLIER_DIR, f"{stamp}-{suffix}")
    os.makedirs(target)
    for name in found:
        os.replace(os.path.join(run_dir, name), os.path.join(target, name))
    return target


def _json_value(value):
    """Floats that JSON cannot carry (NaN, inf) become strings instead of invalid JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def watched_terminal(stream: TextIO) -> bool:
    """True when `stream` is a terminal a person watches, where a redrawn progress bar belongs.

    Under a launcher it is not, even when `isatty()` says so: mpirun gives every rank a pseudo-terminal
    and forwards it, prefixed per line, into its own output (often a pipe or a log file), where a bar
    that redraws with carriage returns never becomes a line.
    """
    from dlrm import dist

    is_terminal = hasattr(stream, "isatty") and stream.isatty()
    return is_terminal and dist.launcher_world().source == "none"


def _end_with_newline(path: str) -> None:
    if os.path.exists(path) and os.path.getsize(path) > 0:
        with open(path, "rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")


class MetricsLog:
    """Logger for one run; every method is a no-op when `enabled` is False (non-primary ranks)."""

    def __init__(self, run_dir: str, enabled: bool = True, use_tqdm: Optional[bool] = None,
                 tensorboard: bool = True, stream: Optional[TextIO] = None, owner: Optional[str] = None,
                 continuing: bool = False):
        """`owner`: of a training run, its checkpoint root ("": none); its records replace (`move_earlier_records`)
        any in `run_dir` but its own when `continuing` (resuming from its own checkpoint). None: append."""
        self.enabled = enabled
        self.run_dir = run_dir
        self.stream = stream or sys.stdout
        self._bar: Any = None  # a tqdm bar on a watched terminal
        self._file: Optional[TextIO] = None
        self._writer: Any = None  # a TensorBoard summary writer, made at the first record (`_summary_writer`)
        self._tensorboard = tensorboard
        if not enabled:
            return
        self.metrics_path = os.path.join(run_dir, METRICS_FILE)
        self._lock = DirLock(run_dir, LOCK_FILE, "run directory", "--run_dir")
        try:
            self._open(owner, continuing, use_tqdm)
        except BaseException:
            self.close(plot=False)  # the lock and any file opened so far
            raise

    def _open(self, owner: Optional[str], continuing: bool, use_tqdm: Optional[bool]) -> None:
        run_dir, moved = self.run_dir, None
        try:
            os.makedirs(run_dir, exist_ok=True)
            problem = self._lock.acquire()
            if problem:
                raise PathError(problem)
            if owner is not None:
                if not continuing or records_owner(run_dir) not in (None, owner):
                    moved = move_earlier_records(run_dir)
                write_text_atomically(os.path.join(run_dir, OWNER_FILE), json.dumps({"checkpoints": owner}) + "\n")
            _end_with_newline(self.metrics_path)  # a killed run may have left a torn last line
            self._file = open(self.metrics_path, "a", buffering=1)
        except OSError as error:
            raise PathError(f"cannot write the run directory {run_dir} (--run_dir): {describe_os_error(error)}") \
                from None
        if use_tqdm is None:
            use_tqdm = watched_terminal(self.stream)
        self.use_tqdm = use_tqdm
        self._last_step = 0
        if moved:
            self.message(f"{run_dir} held the records of an earlier run: moved to {moved}")

    def start(self, total_steps: int, start_step: int = 0) -> None:
        """Training begins (or resumes at `start_step`): open the progress bar on a terminal."""
        if not self.enabled:
            return
        self._last_step = start_step
        if self.use_tqdm and total_steps:
            from tqdm import tqdm

            self._bar = tqdm(total=total_steps, initial=start_step, file=self.stream, unit="step",
                             dynamic_ncols=True)

    # -- records ----------------------------------------------------------------------------------
    def _record(self, kind: str, step: int, values: Dict[str, float]) -> None:
        record = {"kind": kind, "step": int(step), "time": round(time.time(), 3)}
        record.update({k: _json_value(v) for k, v in values.items()})
        if self._file is not None:  # always open when enabled
            self._file.write(json.dumps(record) + "\n")
        writer = self._summary_writer()
        if writer is not None:
            import tensorflow as tf

            with writer.as_default(step=int(step)):
                for name, value in values.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        tf.summary.scalar(f"{kind}/{name}", float(value))

    def _summary_writer(self) -> Any:
        """The TensorBoard writer (None without TensorBoard), made at the first record rather than at the
        start: a run refused before its first record never loads TensorFlow for its log."""
        if self._writer is None and self._tensorboard:
            import tensorflow as tf

            self._writer = tf.summary.create_file_writer(os.path.join(self.run_dir, TENSORBOARD_DIR))
        return self._writer

    def train(self, step: int, loss: float, lr: float, samples_per_sec: float, epoch: float,
              **group_rates: float) -> None:
        """`group_rates`: each optimizer group's rate (`lr_deep`, `lr_wide`) when there are several."""
        if not self.enabled:
            return
        self._record("train", step, {"loss": loss, "lr": lr, "samples_per_sec": samples_per_sec,
                                     "epoch": epoch, **group_rates})
        if self._bar is not None:
            self._bar.update(step - self._last_step)
            self._bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.3g}", sps=f"{samples_per_sec:,.0f}")
        else:
            self.message(f"step {step:>8d}  epoch {epoch:6.3f}  loss {loss:.5f}  lr {lr:.4g}  "
                         f"{samples_per_sec:,.0f} samples/s")
        self._last_step = step

    def eval(self, step: int, metrics: EvalMetrics, bayes: BayesOptimal = BayesOptimal()) -> None:
        """An `eval` record (auc, logloss, rows, map_at_12 and groups if measured, the Bayes-optimal values
        known) and a progress line."""
        if not self.enabled:
            return
        self._record("eval", step, {**metrics.record(), **bayes.record()})
        self.message(f"eval at step {step}: {progress_text(metrics, bayes)}")

    def event(self, kind: str, step: int, **values) -> None:
        """Other one-off records (checkpoint written, run stopped, benchmark result)."""
        if self.enabled:
            self._record(kind, step, values)

    def message(self, text: str) -> None:
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self, plot: bool = True) -> Optional[str]:
        """Flush everything; returns the plot path if one was written."""
        if not self.enabled:
            return None
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        try:
            if self._writer is not None:
                self._writer.flush()
                self._writer.close()
                self._writer = None
            if self._file is not None:
                self._file.close()
                self._file = None
            return plot_metrics(self.metrics_path, os.path.join(self.run_dir, PLOT_FILE)) if plot else None
        finally:
            self._lock.release()


def read_metrics(path: str) -> List[dict]:
    """Records of a metrics file, keeping the last one per (kind, step) (resumed runs repeat steps)."""
    latest: Dict[tuple, dict] = {}
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by a killed run (the resumed run starts on a fresh line)
            latest[(record.get("kind"), record.get("step"))] = record
    return sorted(latest.values(), key=lambda r: (r.get("step", 0), str(r.get("kind"))))


def _plot_eval(ax, evals: List[dict], key: str, label: str) -> None:
    """One evaluation metric against step, with its Bayes-optimal value as a dashed line when known."""
    points = [r for r in evals if isinstance(r.get(key), (int, float))]
    ax.plot([r["step"] for r in points], [r[key] for r in points], marker="o", lw=1, label=label)
    bayes = [r[f"bayes_{key}"] for r in points if isinstance(r.get(f"bayes_{key}"), (int, float))]
    if bayes:
        ax.axhline(bayes[-1], color="gray", ls="--", lw=1, label=f"Bayes-optimal {label}")
        ax.legend(loc="lower right")
    ax.set_ylabel(f"eval {label}")
    ax.grid(alpha=0.3)


def plot_metrics(metrics_path: str, png_path: str) -> Optional[str]:
    """Training loss, evaluation AUC and (when measured) MAP@12 against step, as a PNG (matplotlib, no display)."""
    records = read_metrics(metrics_path)
    train = [r for r in records if r["kind"] == "train" and isinstance(r.get("loss"), (int, float))]
    evals = [r for r in records if r["kind"] == "eval" and isinstance(r.get("auc"), (int, float))]
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with_map = any(isinstance(r.get("map_at_12"), (int, float)) for r in evals)
    fig, axes = plt.subplots(3 if with_map else 2, 1, figsize=(8, 8.5 if with_map else 6), sharex=True)
    loss_ax = axes[0]
    loss_ax.plot([r["step"] for r in train], [r["loss"] for r in train], lw=1)
    loss_ax.set_ylabel("training loss")
    loss_ax.grid(alpha=0.3)
    _plot_eval(axes[1], evals, "auc", "AUC")
    if with_map:
        _plot_eval(axes[2], evals, "map_at_12", "MAP@12")
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
