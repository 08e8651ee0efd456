"""Bad data is refused before step 1: every value of every mapping a run reads, on every rank alike.

Kernel-level tests compare the start-up check with the decode (same earliest bad value, whatever the
threads, blocks and row range); the run-level tests start real `main.py` processes (and 2 real ranks
for the shared check, `python -m tests.workers.data_check`) and look at what they leave behind.
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from dlrm.data.format.errors import DataError
from dlrm.data.format.feature_spec import FeatureSpec
from dlrm.data.reader import decode
from dlrm.data.reader.mapped_files import MappedFiles
from dlrm.data.reader.reader import BatchReader
from dlrm.data.reader.validate import check_mappings
from tests.support import ROOT
from tests.support.datasets import CARDS, make_dataset, poke

TRAIN_ROWS, TEST_ROWS = 2048, 1024
EVALUATION = ["--valid_batch_size", "1024", "--intra_op_threads", "1"]  # eval takes the model from the checkpoint
STEP = ["--embedding_dim", "8", "--bottom_mlp_dims", "16-8", "--top_mlp_dims", "16-1", "--optimizer", "adagrad",
        "--learning_rate", "0.05", "--warmup_steps", "0", "--decay_steps", "0", "--global_batch_size", "256"]
MODEL = [*STEP, "--log_every", "1", *EVALUATION]


# ----------------------------------------------------------------------------- the check kernel
# Bad values added one at a time, each earlier in the file than the ones before (or in the same row,
# of a kind or table the error names first): (file, dtype, index in the file, value, feature, row).
BAD_VALUES = [
    ("cat_20.bin", np.int16, 900, 250, "cat_20", 900),
    ("cat_3.bin", np.int32, 900, -1, "cat_3", 900),  # same row, lower table
    ("numerical.bin", np.float16, 900 * 13 + 7, np.nan, "num_7", 900),  # same row: numericals before ids
    ("label.bin", np.uint8, 900, 2, "label", 900),  # same row: the label first
    ("cat_0.bin", np.int8, 513, 3, "cat_0", 513),
    ("numerical.bin", np.float16, 130 * 13 + 12, np.inf, "num_12", 130),
    ("numerical.bin", np.float16, 129 * 13, -np.inf, "num_0", 129),
    ("cat_25.bin", np.int8, 0, 35, "cat_25", 0),
]


@pytest.mark.parametrize("threads, block_rows", [(1, decode.CHECK_BLOCK_ROWS), (1, 40), (2, 40), (3, 64)])
def test_check_names_the_earliest_bad_value_as_the_decode_does(tmp_path, threads, block_rows):
    spec, data = make_dataset(tmp_path, 1000)
    positives = int(data["train"][0].sum())
    assert MappedFiles(spec, "train").check_rows(0, 1000, threads, block_rows) == (positives, decode.NO_ERROR)
    for file, dtype, index, value, feature, row in BAD_VALUES:
        poke(tmp_path / "train" / file, dtype, index, value)
        files = MappedFiles(FeatureSpec.load(str(tmp_path)), "train")
        with pytest.raises(DataError) as checked:
            files.raise_for(files.check_rows(0, 1000, threads, block_rows)[1])
        with pytest.raises(DataError) as decoded:
            BatchReader(FeatureSpec.load(str(tmp_path)), "train", 1000, prefetch=0).read_batch(0)
        assert (checked.value.file, checked.value.feature, checked.value.row) == \
            (str(tmp_path / "train" / file), feature, row)
        assert str(checked.value) == str(decoded.value)
        # a row range sees only its own rows
        assert files.check_rows(row + 1, 1000, threads, block_rows)[1][2] != row
        assert files.check_rows(0, row, threads, block_rows)[1] == decode.NO_ERROR


def test_check_all_uses_the_check_and_names_the_earliest_row(tmp_path):
    spec, _ = make_dataset(tmp_path, 300)
    poke(tmp_path / "train" / "cat_9.bin", np.int32, 250, 32769)
    poke(tmp_path / "train" / "cat_9.bin", np.int32, 260, -7)
    with pytest.raises(DataError, match=r"feature 'cat_9', row 250: id 32769 is outside \[0, 32769\)"):
        BatchReader(FeatureSpec.load(str(tmp_path)), "train", 64, threads=2).check_all()


# ----------------------------------------------------------------------------- what check_mappings refuses
@pytest.fixture
def two_mappings(tmp_path):
    spec, data = make_dataset(tmp_path, [300, 200], mappings=("train", "test"))
    return tmp_path, data


def test_a_bad_value_in_the_test_mapping_is_named(two_mappings):
    root, data = two_mappings
    poke(root / "test" / "cat_16.bin", FeatureSpec.load(str(root)).dtype("cat_16"), 150, CARDS[16])
    with pytest.raises(DataError) as caught:
        check_mappings(FeatureSpec.load(str(root)), ["train", "test"], ["test"])
    assert (caught.value.file, caught.value.feature, caught.value.row) == (str(root / "test" / "cat_16.bin"),
                                                                          "cat_16", 150)
    summary = check_mappings(FeatureSpec.load(str(root)), ["train"], values=True)
    assert summary == {"train": {"rows": 300, "positives": int(data["train"][0].sum())}}
    # values=False (--skip_data_validation) trusts the values
    assert check_mappings(FeatureSpec.load(str(root)), ["train", "test"], ["test"], values=False)["test"] == \
        {"rows": 200, "positives": int(data["test"][0].sum())}


@pytest.mark.parametrize("values", [True, False])
@pytest.mark.parametrize("label", [0, 1])
def test_a_scored_mapping_of_one_class_is_refused(two_mappings, label, values):
    root, _ = two_mappings
    np.full(200, label, np.uint8).tofile(root / "test" / "label.bin")
    spec = FeatureSpec.load(str(root))
    with pytest.raises(DataError) as caught:
        check_mappings(spec, ["train", "test"], ["test"], values=values)
    assert caught.value.file == str(root / "test" / "label.bin") and caught.value.feature == "label"
    assert f"all 200 labels of mapping 'test' are {label}: the AUC is undefined" in str(caught.value)
    check_mappings(spec, ["train", "test"], [], values=values)  # not scored (inference benchmark): fine


def test_an_empty_mapping_is_refused(two_mappings):
    root, _ = two_mappings
    spec = FeatureSpec.load(str(root))
    for chunk in spec.binary_chunks("test"):
        os.truncate(chunk.path, 0)
    spec.metadata["num_rows"]["test"] = 0
    with pytest.raises(DataError, match=r"mapping 'test' has no rows") as caught:
        check_mappings(spec, ["train", "test"], ["test"], values=False)
    assert caught.value.file == str(root / "test" / "label.bin")


# ----------------------------------------------------------------------------- real runs of main.py
@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    from dlrm.data.synthetic.generator import generate_dataset

    directory = tmp_path_factory.mktemp("generated") / "data"
    generate_dataset(str(directory), CARDS, TRAIN_ROWS, TEST_ROWS, seed=5)
    return directory


@pytest.fixture
def dataset(generated, tmp_path):
    """A private copy of the generated dataset (tests damage it)."""
    return shutil.copytree(generated, tmp_path / "data")


def main_py(tmp_path, dataset, *flags, model=MODEL):
    from tests.support.multirank import run_single

    run = run_single(["main.py", "--dataset_path", str(dataset), "--run_dir", str(tmp_path / "run"), *model,
                      *flags], timeout=180)
    assert not run.timed_out
    return run


def train_records(tmp_path):
    path = tmp_path / "run" / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == "train"]


def test_a_bad_test_row_stops_the_run_before_step_1(tmp_path, dataset):
    """Before: 4 steps trained and checkpointed, then the final evaluation died on the bad test row."""
    path = dataset / "test" / "cat_16.bin"
    poke(path, FeatureSpec.load(str(dataset)).dtype("cat_16"), 700, CARDS[16])
    ckpt = tmp_path / "ckpt"
    run = main_py(tmp_path, dataset, "--max_steps", "4", "--checkpoint_every", "1", "--save_checkpoint_path",
                  str(ckpt))
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"file {path}, feature 'cat_16', row 700: id {CARDS[16]} is outside [0, {CARDS[16]})" in run.stderr
    assert train_records(tmp_path) == [] and not list(ckpt.glob("step_*"))


def test_a_run_refused_for_its_data_ends_before_tensorflow_loads(tmp_path, dataset):
    """The start-up checks run before TensorFlow is imported (on the MPI backend, and with one process): a run
    refused for its data costs about a second, not TensorFlow's start-up."""
    poke(dataset / "train" / "label.bin", np.uint8, 3, 7)
    code = ("import sys; from dlrm.cli import main; status = main(sys.argv[1:]); "
            "print('exit', status, 'tensorflow' in sys.modules)")
    flags = ["--dataset_path", str(dataset), "--run_dir", str(tmp_path / "run"), "--backend", "mpi", *MODEL]
    run = subprocess.run([sys.executable, "-c", code, *flags], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if not k.startswith("HOROVOD_")})
    assert "feature 'label', row 3: label byte 7 is not 0 or 1" in run.stderr, run.stderr[-2000:]
    assert run.stdout.split()[-3:] == ["exit", "1", "False"], run.stdout[-2000:]


def test_a_bad_train_row_beyond_the_steps_is_refused_unless_skipped(tmp_path, dataset):
    """2 steps of 256 rows never reach row 2047: only the start-up check sees it, and the flag skips it."""
    path = dataset / "train" / "numerical.bin"
    poke(path, np.float16, (TRAIN_ROWS - 1) * 13 + 5, np.nan)
    refused = main_py(tmp_path, dataset, "--max_steps", "2")
    assert refused.returncode == 1, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert f"file {path}, feature 'num_5', row {TRAIN_ROWS - 1}: numerical value nan is NaN or inf" in refused.stderr
    assert train_records(tmp_path) == []
    skipped = main_py(tmp_path, dataset, "--max_steps", "2", "--skip_data_validation")
    assert skipped.returncode == 0, skipped.stdout[-2000:] + skipped.stderr[-2000:]
    assert [r["step"] for r in train_records(tmp_path)] == [1, 2]


def test_a_test_mapping_of_one_class_is_refused_in_train_and_eval_mode(tmp_path, dataset):
    """Before: `AUC nan` and exit status 0."""
    ckpt = str(tmp_path / "ckpt")
    trained = main_py(tmp_path, dataset, "--max_steps", "1", "--save_checkpoint_path", ckpt)
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-2000:]
    np.zeros(TEST_ROWS, np.uint8).tofile(dataset / "test" / "label.bin")
    message = f"file {dataset / 'test' / 'label.bin'}, feature 'label': all {TEST_ROWS:,} labels of mapping " \
              f"'test' are 0: the AUC is undefined"
    for mode, model in ((["--mode", "eval", "--restore_checkpoint_path", ckpt], EVALUATION),
                        (["--max_steps", "2"], MODEL)):
        run = main_py(tmp_path, dataset, *mode, model=model)
        assert run.returncode == 1 and message in run.stderr, run.stdout[-2000:] + run.stderr[-2000:]
        assert "AUC nan" not in run.stdout + run.stderr
    # the training benchmark evaluates nothing: it neither reads nor scores the test mapping
    run = main_py(tmp_path, dataset, "--benchmark", "--benchmark_warmup_steps", "1", "--benchmark_steps", "1",
                  "--intra_op_threads", "1", model=STEP)
    assert run.returncode == 0 and "mapping(s) train:" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]


def test_an_empty_test_mapping_is_refused(tmp_path, dataset):
    """Before: trained, then evaluated 0 rows (`AUC nan`) and exited 0."""
    spec = FeatureSpec.load(str(dataset))
    for chunk in spec.binary_chunks("test"):
        os.truncate(chunk.path, 0)
    spec.metadata["num_rows"]["test"] = 0
    spec.save(str(dataset))
    run = main_py(tmp_path, dataset, "--max_steps", "1")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    assert f"file {dataset / 'test' / 'label.bin'}: mapping 'test' has no rows" in run.stderr
    assert train_records(tmp_path) == []


# ----------------------------------------------------------------------------- two real ranks
@pytest.mark.multirank
def test_two_ranks_share_the_check_and_raise_the_same_earliest_row(dataset):
    """Rank 0 checks train rows 0-1023, rank 1 rows 1024-2047 (test: 0-511 / 512-1023). In train only
    rank 1 holds bad rows: both ranks name its earliest (1100). In test both ranks hold one: both name
    rank 0's (400), the earlier one."""
    from tests.support.multirank import run_ranks, worker_argv

    spec = FeatureSpec.load(str(dataset))
    poke(dataset / "train" / "label.bin", np.uint8, 1100, 9)
    poke(dataset / "train" / "cat_3.bin", spec.dtype("cat_3"), 1900, -3)
    poke(dataset / "test" / "cat_6.bin", spec.dtype("cat_6"), 400, CARDS[6])
    poke(dataset / "test" / "numerical.bin", np.float16, 600 * 13, np.inf)
    run = run_ranks(2, worker_argv("data_check", str(dataset)), timeout=120).check()
    assert sorted(run.results) == [0, 1]
    for rank in (0, 1):
        train, test = run.results[rank]["train"], run.results[rank]["test"]
        assert train == [str(dataset / "train" / "label.bin"), "label", 1100], (rank, train)
        assert test == [str(dataset / "test" / "cat_6.bin"), "cat_6", 400], (rank, test)
        assert run.results[rank]["messages"] == run.results[0]["messages"]


@pytest.mark.multirank
def test_a_file_broken_on_one_rank_only_stops_both_and_that_rank_reports_it(dataset, tmp_path):
    """Node-local copies that differ: rank 1's copy of cat_3.bin is truncated. Rank 1 reports it, naming
    itself; rank 0 stops too (no hang in the shared check) and prints nothing."""
    from tests.support.multirank import run_ranks, worker_argv

    copy = shutil.copytree(dataset, tmp_path / "copy_of_rank_1")
    with open(copy / "train" / "cat_3.bin", "r+b") as f:
        f.truncate(10)
    run = run_ranks(2, worker_argv("data_check", str(dataset), str(copy)), timeout=120).check()
    assert run.results[0]["outcomes"] == ["PeerRankFailed", "ok"] and run.results[0]["printed"] == [None]
    assert run.results[1]["outcomes"][0] in ("SpecError", "DataError")
    assert run.results[1]["printed"][0].startswith("error: rank 1: ") and "cat_3.bin" in run.results[1]["printed"][0]
