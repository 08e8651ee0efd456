"""The training loop end to end in one process: archs x optimizers, logs, modes, NaN stop, exact loss."""
import io
import json
import math
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from dlrm.cli import parse_config
from dlrm.cpu_info import cpu_flags, native_bf16
from dlrm.data.format.errors import DataError
from dlrm.data.reader.reader import BatchReader
from dlrm.dist import single_process
from dlrm.errors import PathError, UsageError
from dlrm.train import checkpoint, loop
from dlrm.train.build import build_parts, configure_tensorflow, make_reader
from dlrm.train.checkpoint import saving
from dlrm.train.dataset import prepare_dataset
from dlrm.train.eval_result import BayesOptimal, EvalMetrics
from dlrm.train.metrics_log import MetricsLog, read_metrics
from dlrm.train.run import run
from dlrm.train.step import make_train_step
from tests.support.damage import as_format_2
from tests.support.runs import SMALL, SMALL_DATA, SMALL_DCN, SMALL_STEP

ONE = single_process()  # a world of one, without Horovod


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("data") / "synthetic")


def _run(synthetic_dir, tmp_path, *flags, model_flags=SMALL):
    config = parse_config(["--synthetic_dir", synthetic_dir, "--run_dir", str(tmp_path / "run"), *model_flags, *flags])
    return run(config)


@pytest.mark.parametrize("arch, optimizer, lr, extra", [("dlrm", "sgd", "0.5", []),
                                                         ("dlrm", "adagrad", "0.05", ["--decode_threads", "2"]),
                                                         ("dcnv2", "adam", "0.01", [*SMALL_DCN, "--amp", "--xla"])])
def test_few_steps_train_evaluate_log_and_checkpoint(synthetic_dir, tmp_path, arch, optimizer, lr, extra):
    result = _run(synthetic_dir, tmp_path, "--arch", arch, "--optimizer", optimizer, "--learning_rate", lr,
                  "--max_steps", "6", "--eval_every", "3", "--checkpoint_every", "4",
                  "--save_checkpoint_path", str(tmp_path / "ckpt"), *extra)
    assert result.step == 6 and 0.0 <= result.auc <= 1.0 and math.isfinite(result.logloss)
    assert 0.5 < result.bayes_auc <= 1.0

    records = read_metrics(str(tmp_path / "run/metrics.jsonl"))
    train = [r for r in records if r["kind"] == "train"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["step"] for r in train] == [2, 4, 6]
    assert all(math.isfinite(r["loss"]) and r["samples_per_sec"] > 0 and r["lr"] >= 0 for r in train)
    assert [r["step"] for r in evals] == [3, 6] and evals[-1]["auc"] == result.auc
    precision = [(r["compute_dtype"], r["native_bf16"]) for r in records if r["kind"] == "precision"]
    assert precision == ([("bfloat16", native_bf16(cpu_flags()))] if "--amp" in extra else [])
    assert evals[-1]["bayes_auc"] == result.bayes_auc
    assert os.path.getsize(tmp_path / "run/metrics.png") > 1000
    assert any(name.startswith("events.out.tfevents") for name in os.listdir(tmp_path / "run/tensorboard"))

    assert checkpoint.complete_checkpoints(str(tmp_path / "ckpt")) == ["step_00000004", "step_00000006"]
    meta = checkpoint.read_meta(result.checkpoint)
    assert meta["step"] == 6 and meta["reader"]["batch"] == 6 % meta["reader"]["steps_per_epoch"]
    assert meta["model_shape"]["arch"] == arch and meta["optimizer"]["name"] == optimizer
    slots = set(os.listdir(os.path.join(result.checkpoint, "embedding", "cat_0")))
    assert slots == {"sgd": set(), "adagrad": {"accumulator"}, "adam": {"m", "v"}}[optimizer] | {"value"}


def test_eval_and_inference_benchmark_modes(synthetic_dir, tmp_path):
    ckpt_dir = str(tmp_path / "ckpt")
    trained = _run(synthetic_dir, tmp_path, "--optimizer", "adagrad", "--learning_rate", "0.05",
                   "--max_steps", "4", "--save_checkpoint_path", ckpt_dir)
    evaluated = _run(synthetic_dir, tmp_path, "--mode", "eval", "--restore_checkpoint_path", ckpt_dir,
                     model_flags=SMALL_DATA)
    assert evaluated.step == 4 and evaluated.auc == trained.auc and evaluated.logloss == trained.logloss

    bench = _run(synthetic_dir, tmp_path, "--mode", "inference_benchmark", "--restore_checkpoint_path", ckpt_dir,
                 "--benchmark_warmup_steps", "1", "--benchmark_steps", "3", model_flags=SMALL_DATA)
    assert bench.samples_per_sec > 0 and bench.extra["timed_batches"] == 3 and bench.step == 4
    records = [r for r in read_metrics(str(tmp_path / "run/metrics.jsonl")) if r["kind"] == "inference_benchmark"]
    assert records and records[-1]["samples_per_sec"] == bench.samples_per_sec


def test_eval_takes_the_model_from_the_checkpoint(synthetic_dir, tmp_path):
    """--mode eval and inference_benchmark build the model the checkpoint records: no architecture flag is
    typed again, and one that contradicts the checkpoint is refused naming both values."""
    ckpt_dir = str(tmp_path / "ckpt")
    trained = _run(synthetic_dir, tmp_path, *SMALL_DCN, "--max_steps", "2", "--save_checkpoint_path", ckpt_dir)
    bare = ["--synthetic_dir", synthetic_dir, "--run_dir", str(tmp_path / "run"), *SMALL_DATA,
            "--restore_checkpoint_path", ckpt_dir]
    config = parse_config([*bare, "--mode", "inference_benchmark"])
    assert (config.model.arch, config.model.bottom_mlp, config.model.num_cross_layers) == ("dcnv2", (16, 8), 2)
    evaluated = run(parse_config([*bare, "--mode", "eval"]))
    assert evaluated.step == 2 and evaluated.auc == trained.auc
    with pytest.raises(UsageError) as refused:
        parse_config([*bare, "--mode", "eval", "--top_mlp_dims", "32-1"])
    assert str(refused.value).endswith(
        f"argument --top_mlp_dims: 32-1 contradicts the checkpoint's 16-1 ({trained.checkpoint}/meta.json); "
        f"--mode eval takes the model from the checkpoint: leave --top_mlp_dims out")
    with pytest.raises(UsageError, match="argument --deep_hidden_units: not used by --arch dcnv2"):
        parse_config([*bare, "--mode", "eval", "--deep_hidden_units", "8"])  # another model's flag, not a mismatch


# The one message of a diverged run, whichever check fires first: the loss after a step, or the weights
# before a checkpoint (on AVX2-only CPUs the loss tends to go NaN first, on AVX-512 ones the weights).
DIVERGED = re.compile(r"^(training loss is \S+|weights are NaN/inf) at step (\d+): stopped without writing a "
                      r"checkpoint \(lower --learning_rate or lengthen --warmup_steps, then restart\); "
                      r"last good checkpoint: (\S+)$")


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(synthetic_dir, tmp_path):
    ckpt_dir = str(tmp_path / "ckpt")
    with pytest.raises(saving.NonFiniteLossError) as error:
        # the warmup starts at lr 0 (good checkpoints), then an absurd learning rate blows the weights up
        _run(synthetic_dir, tmp_path, "--optimizer", "sgd", "--learning_rate", "1e37", "--warmup_steps", "4",
             "--decay_steps", "0", "--max_steps", "12", "--checkpoint_every", "1", "--keep_checkpoints", "20",
             "--save_checkpoint_path", ckpt_dir)
    match = DIVERGED.match(str(error.value))
    assert match, str(error.value)
    failed_at, last_good = int(match.group(2)), match.group(3)
    assert 1 < failed_at < 12
    assert checkpoint.find_checkpoint(ckpt_dir) == last_good == os.path.join(ckpt_dir, f"step_{failed_at - 1:08d}")
    assert checkpoint.complete_checkpoints(ckpt_dir)[-1] == f"step_{failed_at - 1:08d}"
    for name in checkpoint.complete_checkpoints(ckpt_dir):  # nothing non-finite was ever written
        assert all(np.isfinite(a).all() for a in checkpoint.read_arrays(os.path.join(ckpt_dir, name)).values())
    stopped = [r for r in read_metrics(str(tmp_path / "run/metrics.jsonl")) if r["kind"] == "stopped"]
    assert [r["step"] for r in stopped] == [failed_at]


ADAM_EVERY_STEP = ["--optimizer", "adam", "--learning_rate", "0.01", "--checkpoint_every", "1"]


@pytest.fixture(scope="module")
def two_adam_steps(synthetic_dir, tmp_path_factory):
    """The checkpoints of 2 Adam steps, trained once for the tests that resume from a copy of them."""
    trained = tmp_path_factory.mktemp("two_adam_steps")
    _run(synthetic_dir, trained, "--max_steps", "2", *ADAM_EVERY_STEP, "--save_checkpoint_path", str(trained / "ckpt"))
    return trained / "ckpt"


@pytest.mark.parametrize("poisoned, check", [("weights", "training loss is nan"),
                                             ("adam_m", "weights are NaN/inf")])
def test_both_divergence_checks_give_one_message(synthetic_dir, two_adam_steps, tmp_path, monkeypatch, poisoned,
                                                 check):
    """Each check forced in turn, on any CPU: a NaN weight makes the next loss NaN; a NaN Adam moment
    leaves the loss finite but makes the weights NaN, found before the next checkpoint. The NaN is put in
    after the restore (a checkpoint holding one is refused: tests/train/test_verified_checkpoints.py)."""
    ckpt_dir = tmp_path / "ckpt"
    flags = [*ADAM_EVERY_STEP, "--save_checkpoint_path", str(ckpt_dir)]
    shutil.copytree(two_adam_steps, ckpt_dir)  # a copy of what `--max_steps 2` with these flags writes
    suffix = ".m" if poisoned == "adam_m" else "bias"  # the last bias adds to the logit directly
    restore = loop.restore

    def restore_then_poison(parts, source, training, verified=False):
        meta = restore(parts, source, training, verified)
        dense = parts.checkpoint_variables(with_optimizer=True)[0]
        target = dense[sorted(key for key in dense if key.endswith(suffix))[-1]]
        target.assign(tf.fill(target.shape, tf.constant(np.nan, target.dtype)))
        return meta

    monkeypatch.setattr(loop, "restore", restore_then_poison)
    with pytest.raises(saving.NonFiniteLossError) as error:
        _run(synthetic_dir, tmp_path, "--max_steps", "4", *flags)
    match = DIVERGED.match(str(error.value))
    assert match, str(error.value)
    assert match.groups() == (match.group(1), "3", str(ckpt_dir / "step_00000002"))
    assert match.group(1).startswith(check)


def test_reader_gets_the_configured_decode_threads_and_prefetch(synthetic_dir):
    config = parse_config(["--synthetic_dir", synthetic_dir] + SMALL + ["--decode_threads", "2",
                                                                        "--prefetch_batches", "3"])
    parts = build_parts(config, prepare_dataset(config.data, ONE, MetricsLog("", enabled=False)), ONE,
                        with_optimizer=False)
    reader = make_reader(parts, config.data.train_mapping, 512)
    assert (reader.threads, reader.prefetch) == (2, 3)
    two_threads = list(reader)
    one_thread = list(BatchReader(parts.spec, config.data.train_mapping, 512, threads=1))
    assert len(two_threads) == len(one_thread) == len(reader) > 1
    for a, b in zip(two_threads, one_thread):
        assert all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("numerical", "categorical", "label"))


def test_the_optimizer_knows_how_many_ids_a_step_can_look_up(synthetic_dir):
    """No step looks up more ids than the global batch's rows times the tables' total hotness: the compiled
    sparse-update paths that so small a step cannot reach are not traced."""
    config = parse_config(["--synthetic_dir", synthetic_dir] + SMALL + ["--optimizer", "adagrad"])
    parts = build_parts(config, prepare_dataset(config.data, ONE, MetricsLog("", enabled=False)), ONE,
                        with_optimizer=True)
    assert parts.embeddings.total_hotness == 26
    assert parts.optimizer.max_ids_per_step == config.data.global_batch_size * 26
    assert parts.optimizer.subtract_rows.compiled is False


def test_loss_is_the_global_batch_mean_also_for_a_short_batch(synthetic_dir, tmp_path):
    config = parse_config(["--synthetic_dir", synthetic_dir] + SMALL + ["--optimizer", "sgd"])
    configure_tensorflow(config.train)
    parts = build_parts(config, prepare_dataset(config.data, ONE, MetricsLog("", enabled=False)), ONE,
                        with_optimizer=True)
    step = make_train_step(parts)
    rng = np.random.default_rng(0)
    for rows in (512, 37):  # a full and a short last batch: the loss is the mean over its rows
        numerical = rng.random((rows, 13), dtype=np.float32)
        categorical = np.zeros((rows, 26), np.int32)
        labels = (rng.random(rows) < 0.5).astype(np.float32)
        logits = parts.model(numerical, categorical).numpy()
        expected = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels, logits)).numpy()
        # rel 1e-5: the traced step may fuse kernels the eager call does not (rounding differs with the CPU's
        # vector width); a wrong denominator would be off by far more
        loss = step(numerical, categorical, labels, np.float32(rows), np.int64(0))
        assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert step.experimental_get_tracing_count() == 1  # no retrace for a new batch size


def test_metrics_log_plain_lines_and_torn_file(tmp_path, capsys):
    import io

    stream = io.StringIO()
    log = MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=stream)
    log.start(10)
    log.train(5, 0.5, 0.1, 1000.0, epoch=0.5)
    log.eval(5, EvalMetrics(0.75, 0.45, rows=100), BayesOptimal(auc=0.8))
    log.close(plot=False)
    assert "step        5" in stream.getvalue() and "AUC 0.75000" in stream.getvalue()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"kind": "train", "st')  # killed mid-line
    log = MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=io.StringIO())
    log.train(5, 0.25, 0.1, 1000.0, epoch=0.5)  # the resumed run repeats step 5
    log.train(6, float("nan"), 0.1, 1000.0, epoch=0.6)
    png = log.close()
    records = read_metrics(str(tmp_path / "metrics.jsonl"))
    assert [(r["kind"], r["step"], r["loss"] if "loss" in r else r["auc"]) for r in records] == \
        [("eval", 5, 0.75), ("train", 5, 0.25), ("train", 6, "nan")]
    assert png and os.path.getsize(png) > 1000
    for line in open(tmp_path / "metrics.jsonl").read().splitlines()[:2]:
        json.loads(line)
    disabled = MetricsLog(str(tmp_path / "rank1"), enabled=False)
    disabled.train(1, 1.0, 1.0, 1.0, epoch=0.0)
    assert disabled.close() is None and not os.path.exists(tmp_path / "rank1")


def test_partial_batch_drop_reports_the_skipped_rows(synthetic_dir, tmp_path):
    """6000 rows in global batches of 512: `drop` trains 11 batches and records the 368 rows left out."""
    result = _run(synthetic_dir, tmp_path, "--partial_batch", "drop", "--max_steps", "1")
    assert result.step == 1
    skipped = [r for r in read_metrics(str(tmp_path / "run/metrics.jsonl")) if r["kind"] == "rows_skipped"]
    assert [(r["rows"], r["per"]) for r in skipped] == [(6000 - 11 * 512, "epoch")]


def test_weights_are_checked_for_nan_and_inf_in_row_chunks(monkeypatch):
    """The check before a checkpoint looks at big tables a few rows at a time (no bool copy of a
    whole table), and still finds a NaN or inf in any chunk, the last partial one included."""
    monkeypatch.setattr(saving, "FINITE_CHECK_ROWS", 4)
    table = np.ones((10, 3), np.float32)  # chunks of rows 0-3, 4-7, 8-9
    scalar, counter = tf.Variable(1.5), tf.Variable(np.int64(7))
    assert saving.all_finite([tf.Variable(table), scalar, counter], ONE)
    for row, value in [(0, np.nan), (5, np.inf), (9, -np.inf)]:
        bad = table.copy()
        bad[row, 1] = value
        assert not saving.all_finite([tf.Variable(bad), scalar, counter], ONE), (row, value)
    assert not saving.all_finite([tf.Variable(table), tf.Variable(np.nan)], ONE)


# ----------------------------------------------------------------------------- stopping on an error
@pytest.fixture
def bad_label_dataset(synthetic_dir, tmp_path):
    """A copy of the small dataset with a label byte of 7 (the reader's DataError) at a given row."""
    from tests.support.datasets import poke

    config = parse_config(["--synthetic_dir", synthetic_dir] + SMALL)
    prepare_dataset(config.data, ONE, MetricsLog("", enabled=False))  # generated if no test did yet

    def make(mapping, row):
        copy = tmp_path / "bad_data"
        shutil.copytree(synthetic_dir, copy)
        poke(copy / mapping / "label.bin", np.uint8, row, 7)
        return str(copy), str(copy / mapping / "label.bin")
    return make


def test_a_bad_training_row_stops_with_a_checkpoint_of_the_last_good_step(bad_label_dataset, tmp_path):
    data, path = bad_label_dataset("train", 3 * 512 + 100)  # in the batch of step 4
    ckpt_dir = str(tmp_path / "ckpt")
    with pytest.raises(DataError) as error:
        _run(data, tmp_path, "--max_steps", "8", "--save_checkpoint_path", ckpt_dir,  # end-only checkpoints
             "--skip_data_validation")  # a row the start-up check would refuse is met in training
    assert (error.value.file, error.value.row) == (path, 3 * 512 + 100)
    assert checkpoint.find_checkpoint(ckpt_dir) == os.path.join(ckpt_dir, "step_00000003")
    stopped = [r for r in read_metrics(str(tmp_path / "run/metrics.jsonl")) if r["kind"] == "stopped"]
    assert [(r["step"], r["reason"]) for r in stopped] == [(3, "could not read the data")]


@pytest.mark.parametrize("eval_every, saved_step", [(None, 4), (2, 2)])
def test_a_bad_test_row_keeps_the_training_done_so_far(bad_label_dataset, tmp_path, eval_every, saved_step):
    """The final checkpoint is written before the final evaluation; an evaluation between steps that fails
    leaves a checkpoint of that step."""
    data, path = bad_label_dataset("test", 1500)
    ckpt_dir = str(tmp_path / "ckpt")
    with pytest.raises(DataError) as error:
        _run(data, tmp_path, "--max_steps", "4", "--save_checkpoint_path", ckpt_dir, "--skip_data_validation",
             *(["--eval_every", str(eval_every)] if eval_every else []))
    assert (error.value.file, error.value.row) == (path, 1500)
    assert checkpoint.complete_checkpoints(ckpt_dir) == [f"step_{saved_step:08d}"]


def test_resuming_with_another_global_batch_size_is_refused(synthetic_dir, tmp_path):
    ckpt_dir = str(tmp_path / "ckpt")
    _run(synthetic_dir, tmp_path, "--max_steps", "2", "--save_checkpoint_path", ckpt_dir)
    meta_path = os.path.join(ckpt_dir, "step_00000002", "meta.json")
    assert checkpoint.read_meta(os.path.dirname(meta_path))["reader"]["global_batch_size"] == 512

    def resume_with_256():
        return _run(synthetic_dir, tmp_path, "--max_steps", "4", "--save_checkpoint_path", ckpt_dir,
                    "--global_batch_size", "256")

    with pytest.raises(checkpoint.CheckpointError) as error:
        resume_with_256()
    assert (f"checkpoint {ckpt_dir}/step_00000002 was written with --global_batch_size 512, this run uses 256"
            in str(error.value)) and "Resume with --global_batch_size 512" in str(error.value)

    # A checkpoint from before the field (and the manifest): its saved configuration still tells; with neither it
    # is accepted.
    as_format_2(os.path.dirname(meta_path))
    meta = checkpoint.read_meta(os.path.dirname(meta_path))
    del meta["reader"]["global_batch_size"]
    _write_json(meta_path, meta)
    with pytest.raises(checkpoint.CheckpointError, match="written with --global_batch_size 512"):
        resume_with_256()
    del meta["config"]
    _write_json(meta_path, meta)
    assert resume_with_256().step == 4


def _write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f)


def test_a_new_run_moves_an_earlier_run_s_records_aside_and_a_resumed_run_appends(synthetic_dir, tmp_path, capsys):
    """Before: a second run into the same --run_dir appended to the first one's metrics.jsonl and
    TensorBoard files, the two runs' records mixed."""
    run_dir = tmp_path / "run"

    def train_steps():
        return [r["step"] for r in read_metrics(str(run_dir / "metrics.jsonl")) if r["kind"] == "train"]

    _run(synthetic_dir, tmp_path, "--max_steps", "2", "--log_every", "1")
    first = (run_dir / "metrics.jsonl").read_text()
    _run(synthetic_dir, tmp_path, "--max_steps", "3", "--log_every", "3")  # a new run: no checkpoint to continue
    earlier = list((run_dir / "earlier").iterdir())
    assert len(earlier) == 1 and (earlier[0] / "metrics.jsonl").read_text() == first
    assert sorted(os.listdir(earlier[0])) == ["metrics.jsonl", "metrics.png", "records.json", "tensorboard"]
    assert train_steps() == [3]
    assert f"{run_dir} held the records of an earlier run: moved to {earlier[0]}" in capsys.readouterr().out

    saving = ["--save_checkpoint_path", str(tmp_path / "ckpt"), "--log_every", "1"]
    _run(synthetic_dir, tmp_path, "--max_steps", "2", *saving)  # new again: the previous records move aside
    _run(synthetic_dir, tmp_path, "--max_steps", "4", *saving)  # continues its own checkpoint: appends
    assert len(list((run_dir / "earlier").iterdir())) == 2 and train_steps() == [1, 2, 3, 4]
    _run(synthetic_dir, tmp_path, "--evaluate", "--save_checkpoint_path", str(tmp_path / "ckpt"),
         model_flags=SMALL_DATA)  # an evaluation appends
    assert len(list((run_dir / "earlier").iterdir())) == 2
    assert [r["step"] for r in read_metrics(str(run_dir / "metrics.jsonl")) if r["kind"] == "eval"][-1] == 4

    _run(synthetic_dir, tmp_path, "--benchmark", "--benchmark_warmup_steps", "1", "--benchmark_steps", "1",
         model_flags=SMALL_STEP)
    assert len(list((run_dir / "earlier").iterdir())) == 3 and train_steps() == []  # the benchmark is a run of its own
    _run(synthetic_dir, tmp_path, "--max_steps", "5", *saving)  # resumes, but the records there are not its own
    assert len(list((run_dir / "earlier").iterdir())) == 4 and train_steps() == [5]


def test_two_runs_cannot_write_one_run_directory(tmp_path):
    held = MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=io.StringIO(), owner="")
    with pytest.raises(PathError, match=rf"^run directory {re.escape(str(tmp_path))} is in use by another run "
                                        rf"\(pid {os.getpid()} on host .*\): two runs must not write one directory; "
                                        rf"wait for that run to end or use another --run_dir$"):
        MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=io.StringIO(), owner="")
    assert held.close(plot=False) is None
    MetricsLog(str(tmp_path), use_tqdm=False, tensorboard=False, stream=io.StringIO()).close(plot=False)
