"""Flags -> Config: reference defaults with a dataset, the demo preset without, explicit flags win."""
import pytest

from dlrm.cli import DEMO_PRESET, build_parser, parse_config
from dlrm.embedding.planner import parse_bytes
from dlrm.config import Config


def test_defaults_with_a_dataset_are_the_reference_config():
    config = parse_config(["--dataset_path", "/data/criteo"])
    expected = Config()
    expected.data.dataset_dir = "/data/criteo"
    assert config == expected
    # the reference numbers themselves (criteo_reference.md), so a drift in config.py is caught too
    assert config.data.global_batch_size == 65536
    assert config.model.embedding_dim == 128
    assert config.model.bottom_mlp == (512, 256, 128)
    assert config.model.top_mlp == (1024, 1024, 512, 256, 1)
    assert (config.optimizer.optimizer, config.optimizer.learning_rate) == ("sgd", 24.0)
    assert (config.optimizer.warmup_steps, config.optimizer.decay_start_step,
            config.optimizer.decay_steps) == (8000, 48000, 24000)
    assert (config.model.num_cross_layers, config.model.cross_projection_dim) == (3, 512)


def test_no_dataset_applies_the_demo_preset_only():
    config = parse_config([])
    assert config.data.dataset_dir is None
    for (section, name), value in DEMO_PRESET.items():
        assert getattr(getattr(config, section), name) == value
    untouched = Config()
    assert config.data.synthetic_preset == untouched.data.synthetic_preset == "tiny"
    assert config.train.mode == "train"


def test_explicit_flags_win_over_the_demo_preset():
    config = parse_config(["--global_batch_size", "512", "--optimizer", "sgd", "--learning_rate", "3"])
    assert config.data.global_batch_size == 512
    assert config.optimizer.optimizer == "sgd"
    assert config.optimizer.learning_rate == 3.0
    assert config.model.embedding_dim == DEMO_PRESET[("model", "embedding_dim")]


def test_every_flag_maps_to_its_field():
    argv = [
        "--dataset_path", "/d", "--synthetic_dir", "/s", "--synthetic_preset", "t15",
        "--synthetic_train_rows", "1000", "--synthetic_test_rows", "100", "--synthetic_seed", "7",
        "--train_mapping", "tr", "--test_mapping", "te", "--global_batch_size", "1024",
        "--valid_batch_size", "4096", "--partial_batch", "drop", "--prefetch_batches", "2",
        "--decode_threads", "3", "--skip_data_validation",
        "--arch", "dcnv2", "--embedding_dim", "64", "--bottom_mlp_dims", "256-64",
        "--top_mlp_dims", "512,256,1", "--dcn_num_layers", "2", "--dcn_low_rank_dim", "128",
        "--optimizer", "adam", "--learning_rate", "0.001", "--warmup_steps", "10",
        "--decay_start_step", "20", "--decay_steps", "30", "--decay_power", "1.5", "--end_learning_rate", "1e-5",
        "--sharding_strategy", "basic", "--rank_memory", "80GiB", "--column_slice_threshold", "2GB",
        "--replicate_threshold", "1MiB",
        "--mode", "inference_benchmark", "--max_steps", "99", "--epochs", "2.5", "--eval_every", "11",
        "--log_every", "3", "--run_dir", "/r", "--save_checkpoint_path", "/c", "--restore_checkpoint_path", "/c0",
        "--checkpoint_every", "13", "--keep_checkpoints", "5", "--amp", "--xla", "--seed", "42",
        "--intra_op_threads", "2", "--inter_op_threads", "1", "--benchmark_warmup_steps", "1",
        "--benchmark_steps", "9",
    ]
    c = parse_config(argv)
    assert (c.data.dataset_dir, c.data.synthetic_dir, c.data.synthetic_preset) == ("/d", "/s", "t15")
    assert (c.data.synthetic_train_rows, c.data.synthetic_test_rows, c.data.synthetic_seed) == (1000, 100, 7)
    assert (c.data.train_mapping, c.data.test_mapping) == ("tr", "te")
    assert (c.data.global_batch_size, c.data.eval_batch_size) == (1024, 4096)
    assert (c.data.partial_batch, c.data.prefetch_batches, c.data.decode_threads) == ("drop", 2, 3)
    assert c.data.skip_data_validation is True and Config().data.skip_data_validation is False
    assert (c.model.arch, c.model.embedding_dim, c.model.bottom_mlp, c.model.top_mlp) == \
        ("dcnv2", 64, (256, 64), (512, 256, 1))
    assert (c.model.num_cross_layers, c.model.cross_projection_dim, c.model.seed) == (2, 128, 42)
    o = c.optimizer
    assert (o.optimizer, o.learning_rate, o.warmup_steps, o.decay_start_step, o.decay_steps,
            o.decay_power, o.end_learning_rate) == ("adam", 0.001, 10, 20, 30, 1.5, 1e-5)
    s = c.sharding
    assert (s.strategy, s.rank_memory_bytes, s.column_slice_threshold_bytes, s.replicate_threshold_bytes) == \
        ("basic", 80 * 2**30, 2 * 10**9, 2**20)
    t = c.train
    assert (t.mode, t.max_steps, t.epochs, t.eval_every_steps, t.log_every_steps, t.run_dir) == \
        ("inference_benchmark", 99, 2.5, 11, 3, "/r")
    assert (t.save_checkpoint_path, t.restore_checkpoint_path, t.checkpoint_every_steps, t.keep_checkpoints) == \
        ("/c", "/c0", 13, 5)
    assert (t.amp, t.xla, t.seed, t.intra_op_threads, t.inter_op_threads) == (True, True, 42, 2, 1)
    assert (t.benchmark_warmup_steps, t.benchmark_steps) == (1, 9)


def test_every_parser_flag_is_exercised_above():
    """A new flag must be added to test_every_flag_maps_to_its_field."""
    flags = {opt for action in build_parser()._actions for opt in action.option_strings} - {"-h", "--help"}
    source = open(__file__).read()
    assert [f for f in sorted(flags) if f'"{f}"' not in source] == []


@pytest.mark.parametrize("argv, message", [
    (["--optimizer", "lamb"], "invalid choice"),
    (["--global_batch_size", "0"], "positive integer"),
    (["--rank_memory", "lots"], "invalid size"),
    (["--top_mlp_dims", "64-2"], "must end in 1 unit"),
    (["--dataset_path", "/d", "--embedding_dim", "64"], "bottom MLP (--bottom_mlp_dims) to end in the embedding dim"),
    (["--mode", "eval"], "--restore_checkpoint_path"),
])
def test_bad_flags_are_rejected_with_a_clear_message(argv, message, capsys):
    with pytest.raises(SystemExit):
        parse_config(argv)
    assert message in capsys.readouterr().err


def test_parse_bytes_units():
    assert parse_bytes("80GiB") == 80 * 2**30
    assert parse_bytes("1.5 MB") == 1_500_000
    assert parse_bytes("1e9") == 10**9
    assert parse_bytes("4096") == 4096


def test_parsing_happens_only_when_asked(monkeypatch):
    import importlib
    import sys

    monkeypatch.setattr(sys, "argv", ["main.py", "--definitely-not-a-flag"])
    cli = importlib.reload(importlib.import_module("dlrm.cli"))  # importing must not read sys.argv
    assert cli.parse_config(["--global_batch_size", "7"]).data.global_batch_size == 7  # only explicit argv
