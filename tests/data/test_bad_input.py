"""Every bad-input case stops with an error naming the file, the feature and (where it applies) the row."""
import os
import resource
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from dlrm.data.format.errors import DataError, SpecError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.format.writer import SplitBinaryWriter
from dlrm.data.reader.reader import BatchReader
from tests.support import ROOT
from tests.support.datasets import CARDS, make_dataset, poke, random_rows
from tests.support.multirank import finish, rank_env, run_ranks, run_single, start_ranks
from tests.support.processes import rank_lines, rank_pids, wait_until


@pytest.fixture
def dataset(tmp_path):
    spec, data = make_dataset(tmp_path, 120)
    return tmp_path, spec, data


def reopen(root, drop_row_count=False):
    spec = FeatureSpec.load(str(root))
    if drop_row_count:
        spec.metadata.pop("num_rows")
    return spec


def open_reader_error(spec):
    with pytest.raises(SpecError) as caught:
        BatchReader(spec, "train", 32)
    return str(caught.value)


# ----------------------------------------------------------------------------- files on open
def test_truncated_file(dataset):
    root, _, _ = dataset
    path = root / "train" / "cat_5.bin"  # int16: 2 bytes per row
    os.truncate(path, 119 * 2)
    message = open_reader_error(reopen(root))
    assert str(path) in message and "feature cat_5" in message and "119 rows" in message and "truncated" in message


def test_wrong_sized_file_not_whole_records(dataset):
    root, _, _ = dataset
    path = root / "train" / "numerical.bin"
    with open(path, "ab") as f:
        f.write(b"\x00")
    message = open_reader_error(reopen(root))
    assert str(path) in message and "num_0..num_12" in message and "not a whole number" in message


def test_mismatched_row_counts_without_metadata(dataset):
    root, _, _ = dataset
    path = root / "train" / "cat_3.bin"  # int32
    with open(path, "ab") as f:
        f.write(np.zeros(4, np.int32).tobytes())
    message = open_reader_error(reopen(root, drop_row_count=True))
    assert str(path) in message and "feature cat_3" in message and "124 rows" in message and "120" in message


def test_every_bad_file_is_listed(dataset):
    root, _, _ = dataset
    os.truncate(root / "train" / "cat_1.bin", 100)
    os.remove(root / "train" / "cat_7.bin")
    message = open_reader_error(reopen(root))
    assert "cat_1.bin" in message and "cat_7.bin" in message and "2 problem(s)" in message


def test_spec_naming_a_missing_file(dataset):
    root, _, _ = dataset
    os.remove(root / "train" / "label.bin")
    message = open_reader_error(reopen(root))
    assert str(root / "train" / "label.bin") in message and "feature label" in message and "does not exist" in message


def test_spec_naming_a_missing_feature(dataset):
    root, spec, _ = dataset
    spec.channel_spec["categorical"].append("cat_99")
    spec.source_spec["train"][2]["features"] = ["cat_77"]
    with pytest.raises(SpecError) as caught:
        spec.validate()
    message = str(caught.value)
    assert "'cat_99', which is missing from feature_spec" in message
    assert "'cat_77', which is missing from feature_spec" in message
    assert "no file for feature 'cat_0'" in message


# ----------------------------------------------------------------------------- values while reading
@pytest.mark.parametrize("table,value", [(3, 40000), (1, -1), (9, 32769), (0, 3)])
def test_id_out_of_range(dataset, table, value, decode_kernels):
    root, _, _ = dataset
    spec = reopen(root)
    path = root / "train" / f"cat_{table}.bin"
    poke(path, spec.dtype(f"cat_{table}"), 100, value)
    # found by the rank whose slice holds row 100 (rank 1: rows 92..119 of batch 1), in a prefetch thread
    reader = BatchReader(spec, "train", 64, rank=1, world_size=2)
    with pytest.raises(DataError) as caught:
        list(reader)
    error = caught.value
    assert (error.file, error.feature, error.row) == (str(path), f"cat_{table}", 100)
    assert f"id {value} is outside [0, {CARDS[table]})" in str(error)
    with pytest.raises(DataError, match="row 100"):
        BatchReader(spec, "train", 64).check_all()


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_numerical(dataset, value, decode_kernels):
    root, _, _ = dataset
    path = root / "train" / "numerical.bin"
    poke(path, np.float16, 50 * 13 + 4, value)
    with pytest.raises(DataError) as caught:
        BatchReader(reopen(root), "train", 32, prefetch=0).check_all()
    assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), "num_4", 50)
    assert "NaN or inf" in str(caught.value)


def test_label_byte_not_bool(dataset):
    root, _, _ = dataset
    poke(root / "train" / "label.bin", np.uint8, 9, 7)
    with pytest.raises(DataError) as caught:
        BatchReader(reopen(root), "train", 32).read_batch(0)
    assert (caught.value.feature, caught.value.row) == ("label", 9)


@pytest.mark.parametrize("threads", [1, 3])
def test_several_bad_values_name_the_earliest_row(dataset, threads, decode_kernels, monkeypatch):
    """Bad values of every kind in one batch: the error names the earliest bad row whatever the number
    of decode threads (3 threads: rows 0..39, 40..79, 80..119); in one row, the label comes first,
    then the numericals, then the ids."""
    from dlrm.data.reader import reader as reader_module

    monkeypatch.setattr(reader_module, "MIN_ROWS_PER_THREAD", 8)
    root, _, _ = dataset
    train = root / "train"
    poke(train / "label.bin", np.uint8, 90, 2)
    poke(train / "numerical.bin", np.float16, 60 * 13 + 2, np.inf)
    poke(train / "cat_3.bin", np.int32, 41, -5)
    expected = [(train / "cat_3.bin", "cat_3", 41), (train / "numerical.bin", "num_7", 41),
                (train / "label.bin", "label", 41)]
    for step, (path, feature, row) in enumerate(expected):
        if step == 1:
            poke(train / "numerical.bin", np.float16, 41 * 13 + 7, np.nan)  # same row as the bad id
        if step == 2:
            poke(train / "label.bin", np.uint8, 41, 3)  # same row again
        with pytest.raises(DataError) as caught:
            BatchReader(reopen(root), "train", 120, prefetch=0, threads=threads).read_batch(0)
        assert (caught.value.file, caught.value.feature, caught.value.row) == (str(path), feature, row)


# ----------------------------------------------------------------------------- values while writing
@pytest.fixture
def writer(tmp_path):
    writer = SplitBinaryWriter(str(tmp_path), FeatureSpec.criteo_like(CARDS, mappings=["train"]), "train")
    writer.write(*random_rows(20))  # errors count rows across chunks
    yield writer
    writer.abort()


def test_writer_rejects_out_of_range_id(writer):
    label, numerical, categorical = random_rows(10)
    categorical[6, 11] = 60
    with pytest.raises(DataError) as caught:
        writer.write(label, numerical, categorical)
    assert (caught.value.feature, caught.value.row) == ("cat_11", 26)
    assert caught.value.file.endswith(os.path.join("train", "cat_11.bin")) and "outside [0, 60)" in str(caught.value)


@pytest.mark.parametrize("value,why", [(np.nan, "NaN or inf"), (np.inf, "NaN or inf"), (1e6, "overflows float16")])
def test_writer_rejects_bad_numerical(writer, value, why):
    label, numerical, categorical = random_rows(10)
    numerical = numerical.astype(np.float64)
    numerical[3, 12] = value
    with pytest.raises(DataError, match=why) as caught:
        writer.write(label, numerical, categorical)
    assert (caught.value.feature, caught.value.row) == ("num_12", 23)


def test_writer_rejects_bad_label_and_shapes(writer):
    label, numerical, categorical = random_rows(10)
    with pytest.raises(DataError, match="label 2 is not 0 or 1") as caught:
        writer.write(np.where(np.arange(10) == 4, 2, 0), numerical, categorical)
    assert caught.value.row == 24
    with pytest.raises(DataError, match="shape"):
        writer.write(label, numerical[:, :12], categorical)
    with pytest.raises(DataError, match="labels must be numbers, got dtype <U1"):
        writer.write(np.array(["1"] * 10), numerical, categorical)
    with pytest.raises(DataError, match="integers"):
        writer.write(label, numerical, categorical.astype(np.float64))
    assert writer.rows_written == 20  # nothing of a rejected chunk was written


# ----------------------------------------------------------------------------- reported by the entry points
def tiny_run_flags(dataset, run_dir) -> list:
    return ["main.py", "--dataset_path", str(dataset), "--embedding_dim", "4", "--bottom_mlp_dims", "8-4",
            "--top_mlp_dims", "8-1", "--global_batch_size", "16", "--valid_batch_size", "32", "--epochs", "1",
            "--learning_rate", "0.05", "--warmup_steps", "0", "--decay_steps", "0", "--intra_op_threads", "1",
            "--run_dir", str(run_dir)]


@pytest.fixture
def bad_id_dataset(tmp_path):
    """A tiny dataset whose train row 40 holds id 20 in a table of 20 rows (cat_1)."""
    cards = [50, 20, 30]
    root = tmp_path / "data"
    spec, _ = make_dataset(root, [64, 32], cards, mappings=("train", "test"))
    poke(root / "train" / "cat_1.bin", spec.dtype("cat_1"), 40, 20)
    return root


def assert_one_clean_message(output: str, *parts: str) -> str:
    errors = [line for line in output.splitlines() if all(part in line for part in parts)]
    assert len(errors) == 1, output[-4000:]
    assert "Traceback" not in output, output[-4000:]
    return errors[0]


def test_a_train_mapping_smaller_than_one_batch_with_drop_is_one_message(tmp_path):
    make_dataset(tmp_path / "data", [12, 40], mappings=("train", "test"))
    flags = tiny_run_flags(tmp_path / "data", tmp_path / "run") + ["--partial_batch", "drop"]  # 12 rows < 16
    run = run_single(flags, timeout=180)
    assert run.returncode == 1, run.stderr[-3000:]
    assert_one_clean_message(run.stderr, "error: mapping 'train' has no complete global batch of 16 rows")


def test_an_unusable_run_dir_is_one_message(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    flags = tiny_run_flags(tmp_path / "no_dataset_needed", tmp_path / "file" / "run")
    run = run_single(flags, timeout=180)
    assert run.returncode == 1, run.stderr[-3000:]
    line = assert_one_clean_message(run.stderr, "error:")
    assert line.startswith(f"error: cannot write the run directory {tmp_path / 'file' / 'run'} (--run_dir): ") \
        and "(ENOTDIR)" in line, line


def test_lr_baseline_on_a_missing_dataset_is_one_message(tmp_path):
    run = subprocess.run([sys.executable, "-m", "dlrm.data.synthetic.lr_baseline", str(tmp_path / "missing")], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert_one_clean_message(run.stderr, "error: invalid feature spec")


def test_data_error_from_main_py_is_one_message_without_traceback(bad_id_dataset, tmp_path):
    run = run_single(tiny_run_flags(bad_id_dataset, tmp_path / "run"), timeout=180)
    assert run.returncode == 1, run.stderr[-3000:]
    line = assert_one_clean_message(run.stderr, "cat_1.bin", "row 40")
    assert line.startswith("error: file ") and "rank" not in line  # one process: no rank named


@pytest.mark.multirank
@pytest.mark.parametrize("found_by", ["start-up check", "training step"])
def test_data_error_with_two_ranks_is_printed_once(bad_id_dataset, tmp_path, found_by):
    """Before: 116 lines and 3 tracebacks. The start-up check shares its findings, so every rank raises the
    same error and rank 0 prints it once; a bad row met in training (check skipped) is reported once by the
    rank that read it, naming itself; its peer adds at most one short line."""
    skip = ["--skip_data_validation"] if found_by == "training step" else []
    run = run_ranks(2, tiny_run_flags(bad_id_dataset, tmp_path / "run") + skip, timeout=360)
    assert run.returncode != 0 and not run.timed_out
    lines = rank_lines(run.stdout + "\n" + run.stderr)
    assert not [text for _, text in lines if "Traceback" in text], run.stderr[-4000:]
    errors = [(rank, text) for rank, text in lines if "error:" in text]
    reported = [(rank, text) for rank, text in errors if "cat_1.bin" in text and "row 40" in text]
    assert len(reported) == 1, errors
    rank, text = reported[0]
    if skip:
        assert f"error: rank {rank}: file " in text
        assert len(errors) <= 2, errors  # the message, and maybe the peer's one line
    else:
        assert rank == 0 and "error: file " in text and errors == reported, errors


@pytest.mark.multirank
@pytest.mark.both_stacks
def test_a_stalled_peer_rank_gives_one_line_not_a_traceback(tmp_path):
    """Rank 1 of a 2-rank main.py run on Horovod is stopped (SIGSTOP) once training is under way: rank 0 waits
    in its next collective until Horovod gives up on the peer (Gloo timeout, 10 s here), then says so in one
    line. (The MPI backend's own stall message: tests/integration/test_mpi_backend.py.)"""
    from dlrm.train import checkpoint

    root = tmp_path / "data"
    make_dataset(root, [4096, 32], [50, 20, 30], mappings=("train", "test"))
    save = tmp_path / "ckpt"
    flags = tiny_run_flags(root, tmp_path / "run") + ["--epochs", "50", "--save_checkpoint_path", str(save),
                                                      "--checkpoint_every", "2"]
    started = time.monotonic()
    proc = start_ranks(2, flags, env={"HOROVOD_GLOO_TIMEOUT_SECONDS": "10"}, result_dir=str(tmp_path),
                       backend="horovod")
    try:
        assert wait_until(lambda: checkpoint.find_checkpoint(str(save)) is not None or proc.poll() is not None,
                         timeout=150), "no checkpoint within 150 s"
        assert proc.poll() is None, "training ended before the stall"
        pids = rank_pids(proc.pid)
        os.kill(pids[1], signal.SIGSTOP)
    finally:
        run = finish(proc, timeout=120 + (time.monotonic() - started), started=started, result_dir=str(tmp_path))
    assert run.returncode != 0 and not run.timed_out
    lines = rank_lines(run.stdout + "\n" + run.stderr)
    assert not [text for _, text in lines if "Traceback" in text], run.stderr[-4000:]
    errors = [text for rank, text in lines if "error:" in text]
    assert errors == ["error: rank 0: stopped because another rank failed or stalled (Horovod shut down); "
                      "the first error above says why"], run.stderr[-4000:]


# ----------------------------------------------------------------------------- memory before allocation
@pytest.fixture
def wide_table_dataset(tmp_path):
    """A few rows, but one table of 2**22 rows: 64 MiB of float32 weights at dim 4 (SGD)."""
    root = tmp_path / "wide"
    make_dataset(root, [32, 16], [2**22, 10], mappings=("train", "test"))
    return root


def test_tables_over_rank_memory_are_refused_before_allocation_on_one_process(wide_table_dataset, tmp_path):
    """--rank_memory was ignored with one process: the run went on (and with a t15-sized model died in
    numpy's allocator). Now the plan is checked at any world size and names the smallest budget."""
    run = run_single(tiny_run_flags(wide_table_dataset, tmp_path / "run") + ["--rank_memory", "32MiB"],
                     timeout=180)
    assert run.returncode == 1, run.stderr[-3000:]
    line = assert_one_clean_message(run.stderr, "error:")
    assert "table 'cat_0' (4,194,304 rows x 4 cols" in line and "need at least 64.01 MiB per rank" in line, line
    assert "--rank_memory" in line


def test_tables_over_the_address_space_limit_are_refused_before_allocation(tmp_path):
    """A real limit (ulimit -v 6 GiB) and tables of 8 GiB (2**26 rows x 32 cols): refused with the
    sizes before anything is allocated, whatever the machine's RAM (the limit is the smaller)."""
    root = tmp_path / "huge"
    make_dataset(root, [32, 16], [2**26, 10], mappings=("train", "test"))
    flags = tiny_run_flags(root, tmp_path / "run") + ["--embedding_dim", "32", "--bottom_mlp_dims", "8-32"]
    limit = 6 * 2**30
    proc = subprocess.run(
        [sys.executable, *flags], cwd=ROOT, env=rank_env(), capture_output=True, text=True, timeout=180,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = assert_one_clean_message(proc.stderr, "error:")
    assert "the embedding tables need 8.00 GiB" in line and "address-space limit (ulimit -v)" in line, line


def test_the_address_space_limit_is_per_process_not_shared_by_the_ranks_of_a_node():
    """`ulimit -v` limits each process: with 4 ranks on a node each still has all of it (the machine's and
    a cgroup's memory are what the ranks share)."""
    code = ("import resource; from dlrm.embedding.memory_check import available_memory, _address_space_room; "
            "room = _address_space_room(); print(room, *available_memory(1), sep='|'); "
            "print(room, *available_memory(4), sep='|')")
    limit_above_now = "import resource, os; v = int([l.split()[1] for l in open('/proc/self/status') " \
        "if l.startswith('VmSize')][0]) * 1024; resource.setrlimit(resource.RLIMIT_AS, (v + 2**28, v + 2**28)); "
    proc = subprocess.run([sys.executable, "-c", limit_above_now + code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    (_, one, why_one), (_, four, why_four) = [line.split("|") for line in proc.stdout.splitlines()]
    assert why_one == why_four == "the address-space limit (ulimit -v)", proc.stdout
    assert abs(int(one) - int(four)) < 2**24, proc.stdout  # the same room, not a quarter of it


# ----------------------------------------------------------------------------- generator output
def test_generator_refuses_to_overwrite_a_dataset_without_overwrite(tmp_path):
    out = tmp_path / "gen"
    args = [sys.executable, "-m", "dlrm.data.synthetic", "--out", str(out), "--cardinalities", "10,20",
            "--train_rows", "100", "--test_rows", "10"]
    first = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    before = (out / "feature_spec.yaml").read_bytes()
    again = subprocess.run(args + ["--seed", "7"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "Traceback" not in again.stderr
    assert again.stderr.strip() == f"error: --out {out} already holds a dataset: pass --overwrite to replace it, " \
                                   f"or choose another directory"
    assert (out / "feature_spec.yaml").read_bytes() == before
    replaced = subprocess.run(args + ["--seed", "7", "--overwrite"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    assert replaced.returncode == 0, replaced.stderr
    assert (out / "feature_spec.yaml").read_bytes() != before
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    foreign = subprocess.run(args[:4] + [str(tmp_path / "other"), "--overwrite"] + args[5:], cwd=ROOT,
                             capture_output=True, text=True, timeout=120)
    assert foreign.returncode == 1 and "holds no dataset" in foreign.stderr
    assert (tmp_path / "other" / "notes.txt").read_text() == "mine"


def test_an_output_that_a_rename_cannot_replace_is_refused_before_any_work(tmp_path):
    """The output is renamed into place at the end: a symbolic link (it would become a directory) and a mount
    point (the rename fails) are refused first, with the way out."""
    from dlrm.data.format.writer import dataset_dir
    from dlrm.output_dir import OutputDirError

    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OutputDirError, match=f"--out {tmp_path / 'link'} is a symbolic link: name the directory it "
                                             f"points to \\({tmp_path / 'real'}\\)"):
        dataset_dir(str(tmp_path / "link"), "--out").check(overwrite=True)
    with pytest.raises(OutputDirError, match="--out / is a mount point, which a finished output cannot be renamed "
                                             "over: write into a directory below it"):
        dataset_dir("/", "--out").check(overwrite=True)


def test_a_synthetic_dir_in_the_way_is_one_message_and_left_alone(tmp_path):
    """Before, an outdated --synthetic_dir was removed whatever it held; a file there gave a traceback."""
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    for target, why in [(tmp_path / "mine", "is a non-empty directory that holds no dataset (no feature_spec.yaml): "
                                            "choose a new or empty directory"),
                        (tmp_path / "mine" / "notes.txt", "exists and is not a directory")]:
        run = subprocess.run([sys.executable, "main.py", "--synthetic_dir", str(target), "--max_steps", "1",
                              "--run_dir", str(tmp_path / "run")],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 1 and run.stderr.splitlines()[-1] == f"error: --synthetic_dir {target} {why}", \
            run.stderr[-2000:]
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


def test_ctrl_c_outside_training_exits_130_with_one_line(tmp_path):
    """SIGINT while the generator writes (a real signal to a real process): no KeyboardInterrupt traceback."""
    out = tmp_path / "gen"
    # Ctrl-C's default action, as in a terminal: a suite started in the background (`cmd &`) ignores SIGINT,
    # and a Python started with SIGINT ignored never raises KeyboardInterrupt.
    proc = subprocess.Popen([sys.executable, "-m", "dlrm.data.synthetic", "--out", str(out), "--preset", "tiny",
                             "--train_rows", "200000000", "--test_rows", "10"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # Rows written: past start-up and the kernels' first compilation (a signal is handled between
        # bytecodes, so one sent during a long compile would wait for it).
        def writing() -> bool:
            try:
                return any(path.stat().st_size > 0 for path in tmp_path.glob("gen.tmp-*/train/*.partial"))
            except OSError:  # renamed or removed meanwhile
                return False

        deadline = time.monotonic() + 120
        while not writing() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.poll() is None, "the generator ended before the signal"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr.strip() == "interrupted (Ctrl-C)", stderr
    assert list(tmp_path.iterdir()) == [], "an interrupted generator leaves nothing behind"
