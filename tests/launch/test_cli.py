"""Flags -> Config: reference defaults with a dataset, the demo preset without, explicit flags win.

Bad flags of every entry point: refused with a message naming the flag, exit status 2, no traceback.
"""
import subprocess
import sys

import pytest

from dlrm.cli import build_parser, parse_config
from dlrm.cli_flags import FLAG_GROUPS
from dlrm.cli_presets import DEMO_PRESET, WIDEDEEP_DEMO_CROSSES, WIDEDEEP_DEMO_PRESET, WIDEDEEP_PRESET
from dlrm.config import Config, PartialConfig
from dlrm.data.synthetic.widedeep_model import PAIR_FEATURES
from dlrm.errors import UsageError
from tests.support import ROOT


def test_defaults_with_a_dataset_are_the_reference_config():
    config = parse_config(["--dataset_path", "/data/criteo"])
    expected = Config()
    expected.data.dataset_dir = "/data/criteo"
    assert config == expected
    # the reference numbers themselves (NVIDIA's DLRM example), so a drift in config.py is caught too
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
    assert config.model.embedding_dim == DEMO_PRESET.get("model", "embedding_dim")


def test_every_flag_maps_to_its_field():
    argv = [
        "--dataset_path", "/d", "--synthetic_dir", "/s", "--synthetic_preset", "t15",
        "--synthetic_train_rows", "1000", "--synthetic_test_rows", "100", "--synthetic_seed", "7",
        "--train_mapping", "tr", "--test_mapping", "te", "--global_batch_size", "1024",
        "--valid_batch_size", "4096", "--partial_batch", "drop", "--prefetch_batches", "2",
        "--decode_threads", "3", "--skip_data_validation",
        "--arch", "dcnv2", "--embedding_dim", "64", "--combiner", "mean", "--bottom_mlp_dims", "256-64",
        "--top_mlp_dims", "512,256,1", "--dcn_num_layers", "2", "--dcn_low_rank_dim", "128",
        "--optimizer", "adam", "--learning_rate", "0.001", "--warmup_steps", "10",
        "--decay_start_step", "20", "--decay_steps", "30", "--decay_power", "1.5", "--end_learning_rate", "1e-5",
        "--sharding_strategy", "basic", "--rank_memory", "80GiB", "--column_slice_threshold", "2GB",
        "--replicate_threshold", "1MiB",
        "--mode", "train", "--max_steps", "99", "--epochs", "2.5", "--eval_every", "11",
        "--log_every", "3", "--run_dir", "/r", "--save_checkpoint_path", "/c", "--restore_checkpoint_path", "/c0",
        "--checkpoint_every", "13", "--keep_checkpoints", "5", "--amp", "--xla", "--seed", "42",
        "--intra_op_threads", "2", "--inter_op_threads", "1", "--debug", "--exchange_ids_in_step",
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
    assert c.model.combiner == "mean" and Config().model.combiner == "sum"
    o = c.optimizer
    assert (o.optimizer, o.learning_rate, o.warmup_steps, o.decay_start_step, o.decay_steps,
            o.decay_power, o.end_learning_rate) == ("adam", 0.001, 10, 20, 30, 1.5, 1e-5)
    s = c.sharding
    assert (s.strategy, s.rank_memory_bytes, s.column_slice_threshold_bytes, s.replicate_threshold_bytes) == \
        ("basic", 80 * 2**30, 2 * 2**30, 2**20)  # GB is 1024-based like GiB (dlrm.sizes)
    t = c.train
    assert (t.mode, t.max_steps, t.epochs, t.eval_every_steps, t.log_every_steps, t.run_dir) == \
        ("train", 99, 2.5, 11, 3, "/r")
    assert (t.save_checkpoint_path, t.restore_checkpoint_path, t.checkpoint_every_steps, t.keep_checkpoints) == \
        ("/c", "/c0", 13, 5)
    assert (t.amp, t.xla, t.seed, t.intra_op_threads, t.inter_op_threads) == (True, True, 42, 2, 1)
    assert t.debug is True
    assert t.exchange_ids_in_step is True and Config().train.exchange_ids_in_step is False
    timed = parse_config(["--mode", "inference_benchmark", "--benchmark_warmup_steps", "1", "--benchmark_steps", "9"])
    assert (timed.train.benchmark_warmup_steps, timed.train.benchmark_steps) == (1, 9)


def test_export_flag_maps_to_its_field():
    """--saved_model_output_path exports the final checkpoint of a training run (docs/export.md)."""
    c = parse_config(["--save_checkpoint_path", "/c", "--saved_model_output_path", "/m"])
    assert c.train.saved_model_output_path == "/m" and Config().train.saved_model_output_path is None


def test_backend_flag_maps_to_its_field():
    """--backend chooses the process group's backend (dlrm.dist); auto decides from the launcher."""
    assert parse_config(["--backend", "mpi"]).train.backend == "mpi" and Config().train.backend == "auto"
    with pytest.raises(UsageError):
        parse_config(["--backend", "nccl"])


def test_predictions_path_in_the_evaluating_modes():
    assert parse_config(["--predictions_path", "/p.csv"]).train.predictions_path == "/p.csv"
    config = parse_config(["--mode", "eval", "--restore_checkpoint_path", "/c", "--predictions_path", "p.csv"])
    assert config.train.predictions_path == "p.csv" and Config().train.predictions_path is None


def test_widedeep_flags_map_to_their_fields_and_take_nvidias_defaults():
    c = parse_config(["--arch", "widedeep", "--dataset_path", "/d"])
    assert (c.data.global_batch_size, c.data.eval_batch_size, c.train.epochs) == (131072, 131072, 20.0)
    assert (c.model.deep_hidden_units, c.model.deep_dropout, c.model.model_type) == \
        ((1024,) * 5, 0.1, "wide_n_deep")
    o = c.optimizer
    assert (o.linear_learning_rate, o.deep_learning_rate, o.deep_warmup_epochs, o.deep_optimizer) == \
        (0.02, 0.00012, 6.0, "rmsprop")
    c = parse_config(["--arch", "widedeep", "--dataset_path", "/d", "--deep_hidden_units", "64", "32",
                      "--deep_dropout", "0", "--linear_learning_rate", "0.1",
                      "--deep_learning_rate", "0.001", "--deep_warmup_epochs", "1", "--deep_optimizer", "adagrad",
                      "--linear_initial_accumulator", "1e-6",
                      "--num_epochs", "3", "--benchmark"])
    assert (c.model.deep_hidden_units, c.model.deep_dropout, c.model.model_type) == ((64, 32), 0.0, "wide_n_deep")
    assert c.model.wide_crosses == () and c.model.wide_cross_buckets == 1 << 20  # none: NVIDIA's TF2 config
    crossed = parse_config(["--arch", "widedeep", "--dataset_path", "/d", "--wide_crosses", "ad_id:platform, a:b",
                            "--wide_cross_buckets", "4096"]).model
    assert (crossed.wide_crosses, crossed.wide_cross_buckets) == ((("ad_id", "platform"), ("a", "b")), 4096)
    o = c.optimizer
    assert (o.linear_learning_rate, o.deep_learning_rate, o.deep_warmup_epochs, o.deep_optimizer) == \
        (0.1, 0.001, 1.0, "adagrad")
    assert o.linear_initial_accumulator == 1e-6 and Config().optimizer.linear_initial_accumulator == 0.1
    assert (c.train.epochs, c.train.benchmark) == (3.0, True)
    evaluate = parse_config(["--arch", "widedeep", "--evaluate", "--restore_checkpoint_path", "/c"])
    assert evaluate.train.mode == "eval"
    for (section, name), value in dict([*WIDEDEEP_PRESET.items(), *WIDEDEEP_DEMO_PRESET.items()]).items():  # the demo
        assert getattr(getattr(evaluate, section), name) == value
    assert evaluate.data.synthetic_preset == "widedeep_tiny" and evaluate.model.bottom_mlp == Config().model.bottom_mlp


def test_the_widedeep_demo_crosses_the_generators_pairs_unless_told_otherwise():
    assert WIDEDEEP_DEMO_CROSSES == PAIR_FEATURES  # the preset states them; the generator plants them
    assert parse_config(["--arch", "widedeep"]).model.wide_crosses == PAIR_FEATURES
    assert parse_config(["--arch", "widedeep", "--model_type", "wide"]).model.wide_crosses == PAIR_FEATURES
    assert parse_config(["--arch", "widedeep", "--model_type", "deep"]).model.wide_crosses == ()  # no wide part
    assert parse_config(["--arch", "widedeep", "--wide_crosses", "ad_id:platform"]).model.wide_crosses == \
        (("ad_id", "platform"),)


@pytest.mark.parametrize("argv, message", [
    (["--deep_dropout", "1"], "argument --deep_dropout: expected a rate in [0, 1), got '1'"),
    (["--arch", "widedeep", "--wide_crosses", "ad_id:ad_id"], "argument --wide_crosses: 'ad_id:ad_id' crosses "
     "feature 'ad_id' with itself"),
    (["--arch", "widedeep", "--wide_crosses", "a:b,c:d,b:a"], "argument --wide_crosses: the pair b:a is listed twice"),
    (["--arch", "widedeep", "--wide_crosses", "a:b,a:b"], "argument --wide_crosses: the pair a:b is listed twice"),
    (["--arch", "widedeep", "--wide_crosses", "a:b:c"], "argument --wide_crosses: expected feature pairs A:B "
     "separated by ',' (e.g. ad_id:geo_location_state), got 'a:b:c'"),
    (["--arch", "widedeep", "--wide_crosses", "a:b,"], "got '' in 'a:b,'"),
    (["--arch", "widedeep", "--wide_cross_buckets", "0"], "argument --wide_cross_buckets: expected a positive integer"),
    (["--arch", "widedeep", "--wide_cross_buckets", str(2**31)], "--wide_cross_buckets must be in [1, 2147483647]"),
    (["--wide_crosses", "a:b"], "argument --wide_crosses: not used by --arch dlrm (it applies to --arch widedeep)"),
    (["--arch", "widedeep", "--model_type", "deep", "--wide_crosses", "a:b"],
     "argument --wide_crosses: not used by --model_type deep (it applies to --model_type wide and wide_n_deep)"),
    (["--model_type", "linear"], "argument --model_type: invalid choice"),
    (["--arch", "widedeep", "--num_epochs", "2", "--deep_warmup_epochs", "3"],
     "--deep_warmup_epochs (3) must not exceed --num_epochs (2)"),
    (["--benchmark", "--mode", "inference_benchmark"], "--benchmark times training steps"),
])
def test_bad_widedeep_flags_are_refused(argv, message):
    with pytest.raises(UsageError) as caught:
        parse_config(argv)
    assert message in str(caught.value)


@pytest.mark.parametrize("argv, message", [
    (["--model_type", "wide"], "argument --model_type: not used by --arch dlrm (it applies to --arch widedeep)"),
    (["--deep_learning_rate", "5"], "argument --deep_learning_rate: not used by --arch dlrm"),
    (["--linear_learning_rate", "3"], "argument --linear_learning_rate: not used by --arch dlrm"),
    (["--arch", "widedeep", "--bottom_mlp_dims", "999-7"],
     "argument --bottom_mlp_dims: not used by --arch widedeep (it applies to --arch dlrm and dcnv2)"),
    (["--arch", "widedeep", "--optimizer", "sgd"], "argument --optimizer: not used by --arch widedeep"),
    (["--arch", "widedeep", "--learning_rate", "100"], "argument --learning_rate: not used by --arch widedeep"),
    (["--dcn_num_layers", "2"], "argument --dcn_num_layers: not used by --arch dlrm (it applies to --arch dcnv2)"),
    (["--arch", "widedeep", "--model_type", "wide", "--deep_hidden_units", "8"],
     "argument --deep_hidden_units: not used by --model_type wide (it applies to --model_type deep and wide_n_deep)"),
    (["--arch", "widedeep", "--model_type", "deep", "--linear_initial_accumulator", "0.5"],
     "argument --linear_initial_accumulator: not used by --model_type deep"),
    (["--evaluate", "--mode", "train"], "argument --mode: contradicts --evaluate (both set train.mode)"),
    (["--mode", "train", "--evaluate"], "argument --evaluate: contradicts --mode (both set train.mode)"),
    (["--epochs", "2", "--num_epochs", "3"], "argument --num_epochs: contradicts --epochs (both set train.epochs)"),
    (["--mode", "eval", "--learning_rate", "1"], "argument --learning_rate: not used by --mode eval (it applies to "
                                                 "--mode train and --mode train --benchmark)"),
    (["--evaluate", "--checkpoint_every", "5"], "argument --checkpoint_every: not used by --mode eval"),
    (["--mode", "inference_benchmark", "--global_batch_size", "8"],
     "argument --global_batch_size: not used by --mode inference_benchmark (it applies to --mode train and "
     "--mode train --benchmark)"),
    (["--mode", "eval", "--benchmark_steps", "3"], "argument --benchmark_steps: not used by --mode eval (it applies "
                                                   "to --mode train --benchmark and --mode inference_benchmark)"),
    (["--mode", "train", "--benchmark_warmup_steps", "3"], "argument --benchmark_warmup_steps: not used by --mode "
                                                           "train (it applies to --mode train --benchmark and"),
    (["--benchmark", "--max_steps", "3"], "argument --max_steps: not used by --mode train --benchmark (it applies to "
                                          "--mode train)"),
    (["--benchmark", "--eval_batch_size", "8"], "argument --eval_batch_size: not used by --mode train --benchmark"),
    (["--benchmark", "--epochs", "2"], "argument --epochs: not used by --benchmark with --arch dlrm (its length is "
                                       "--benchmark_steps"),
    (["--arch", "widedeep", "--model_type", "wide", "--benchmark", "--num_epochs", "2"],
     "argument --num_epochs: not used by --benchmark with --arch widedeep --model_type wide"),
    (["--benchmark", "--predictions_path", "p.csv"], "argument --predictions_path: not used by --mode train "
                                                     "--benchmark (it applies to --mode train and --mode eval)"),
    (["--mode", "train", "--checkpoint_every", "5"], "argument --checkpoint_every: not used without "
                                                     "--save_checkpoint_path"),
    (["--mode", "train", "--keep_checkpoints", "2"], "argument --keep_checkpoints: not used without "
                                                     "--save_checkpoint_path"),
    (["--mod", "eval"], "unrecognized arguments: --mod eval"),  # no abbreviation: launchers read --mode as typed
])
def test_a_flag_that_would_be_ignored_or_overridden_is_refused(argv, message):
    """Before: each of these exited 0 as if the flag had not been given (or the last of two won)."""
    with pytest.raises(UsageError) as caught:
        parse_config([*argv, "--restore_checkpoint_path", "/c"])
    assert message in str(caught.value)
    agreeing = parse_config(["--valid_batch_size", "64", "--eval_batch_size", "64", "--evaluate", "--mode", "eval",
                             "--restore_checkpoint_path", "/c"])
    assert (agreeing.data.eval_batch_size, agreeing.train.mode) == (64, "eval")


def test_flags_refused_elsewhere_apply_in_their_place():
    wide = parse_config(["--arch", "widedeep", "--model_type", "wide", "--linear_learning_rate", "3",
                         "--linear_initial_accumulator", "0.5", "--wide_crosses", "a:b"])
    assert (wide.optimizer.linear_learning_rate, wide.optimizer.linear_initial_accumulator) == (3.0, 0.5)
    deep = parse_config(["--arch", "widedeep", "--model_type", "deep", "--deep_learning_rate", "5",
                         "--deep_hidden_units", "8", "--deep_dropout", "0.1", "--deep_optimizer", "adagrad"])
    assert (deep.optimizer.deep_learning_rate, deep.model.deep_hidden_units) == (5.0, (8,))
    dcn = parse_config(["--arch", "dcnv2", "--dcn_num_layers", "2", "--bottom_mlp_dims", "8-4", "--learning_rate", "1"])
    assert (dcn.model.num_cross_layers, dcn.model.bottom_mlp, dcn.optimizer.learning_rate) == (2, (8, 4), 1.0)




def test_the_flag_table_names_existing_fields_and_building_a_parser_changes_nothing():
    defaults = Config()
    flags = [flag for group in FLAG_GROUPS for flag in group.flags]
    for flag in flags:
        for section, name in flag.fields:
            assert hasattr(getattr(defaults, section), name), flag.name
    assert len({flag.name for flag in flags}) == len(flags)
    before = repr(FLAG_GROUPS)
    build_parser(), build_parser()
    assert repr(FLAG_GROUPS) == before
    with pytest.raises(AttributeError):
        flags[0].field = "data.synthetic_dir"  # type: ignore[misc]


def test_a_partial_config_refuses_unknown_fields_and_leaves_the_config_it_is_applied_to():
    with pytest.raises(TypeError, match="model has no field"):
        PartialConfig(model={"bottom_mlp_dims": (1,)})
    config = Config()
    changed = DEMO_PRESET.applied_to(config)
    assert config == Config() and changed.model.embedding_dim == 16 and changed.data.dataset_dir is None
    with pytest.raises(TypeError):
        DEMO_PRESET.model["embedding_dim"] = 8  # type: ignore[index]


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
    (["--combiner", "max"], "argument --combiner: invalid choice"),
    (["--mode", "eval"], "--restore_checkpoint_path"),
    # accepted silently before: each is now refused, naming the flag
    (["--decay_power", "-1"], "argument --decay_power: expected a positive number, got '-1'"),
    (["--decay_power", "0"], "argument --decay_power: expected a positive number"),
    (["--learning_rate", "inf"], "argument --learning_rate: expected a positive number, got 'inf' (not a finite"),
    (["--learning_rate", "nan"], "argument --learning_rate: expected a positive number, got 'nan' (not a finite"),
    (["--end_learning_rate", "-1"], "argument --end_learning_rate: expected a number >= 0, got '-1'"),
    (["--seed", "-1"], "argument --seed: expected a seed, an integer from 0 to 4294967295, got '-1'"),
    (["--synthetic_seed", str(2**32)], "argument --synthetic_seed: expected a seed"),
    (["--bottom_mlp_dims", "64--16"], "argument --bottom_mlp_dims: expected positive integers separated by"),
    (["--top_mlp_dims", "64,,1"], "argument --top_mlp_dims: expected positive integers separated by"),
    (["--epochs", "inf"], "argument --epochs: expected a positive number"),
    (["--rank_memory", "0"], "argument --rank_memory: expected a memory size above 0"),
    (["--rank_memory", "1e999"], "argument --rank_memory: invalid size '1e999': not a finite number"),
    (["--warmup_steps", "-1"], "argument --warmup_steps: expected an integer >= 0, got '-1'"),
    (["--global_batch_size", "abc"], "argument --global_batch_size: expected a positive integer, got 'abc'"),
    (["--warmup_steps", "300"], "--decay_start_step (200) must not come before the end of the warmup"),
    (["--mode", "inference_benchmark", "--predictions_path", "p.csv"],
     "argument --predictions_path: not used by --mode inference_benchmark (it applies to --mode train and "
     "--mode eval)"),
])
def test_bad_flags_are_rejected_with_a_clear_message(argv, message):
    with pytest.raises(UsageError) as caught:
        parse_config(argv)
    assert message in str(caught.value)


# The parsers of every entry point; each value below is wrong for every typed flag.
def _all_parsers():
    from dlrm.data.synthetic import cli as synthetic
    from dlrm.data.synthetic import lr_baseline, outbrain_raw
    from dlrm.data.transcode import cli as transcode
    from dlrm.embedding.planner import cli as planner
    from dlrm.launch import cli as launch

    return {"main.py": build_parser(), "planner": planner.build_parser(), "synthetic": synthetic.build_parser(),
            "transcode": transcode.build_parser(), "launch": launch.build_parser(),
            "lr_baseline": lr_baseline.build_parser(), "outbrain_raw": outbrain_raw.build_parser()}


def _typed_flags():
    for name, parser in _all_parsers().items():
        for action in parser._actions:
            if action.option_strings and action.type not in (None, str) and action.choices is None:
                yield name, parser, action.option_strings[0]


@pytest.mark.parametrize("bad", ["abc", "-1", "nan", "inf", "1e999", ""])
def test_every_typed_flag_of_every_cli_refuses_bad_values_naming_the_flag(bad):
    checked = 0
    for name, parser, flag in _typed_flags():
        with pytest.raises(UsageError) as caught:
            parser.parse_args([flag, bad])
        message = str(caught.value)
        assert f"argument {flag}: " in message, (name, flag, message)
        assert "invalid _" not in message and "<function" not in message and " value: " not in message, message
        checked += 1
    assert checked >= 40  # every CLI's numeric flags are covered


def test_help_shows_list_defaults_as_typed(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: 512-256-128; demo: 64-32-16)" in text
    assert "(default: 1024-1024-512-256-1; demo: 256-128-1)" in text
    assert "(512, 256, 128)" not in text
    assert "(default: 1024 1024 1024 1024 1024; widedeep demo: 256 256 256)" in text  # nargs: as typed


def _cli(args, timeout=60):
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("args, message", [
    (["main.py", "--end_learning_rate", "-1"], "argument --end_learning_rate: expected a number >= 0"),
    (["main.py", "--seed", "-1"], "argument --seed: expected a seed"),
    (["main.py", "--decay_power", "-1"], "argument --decay_power: expected a positive number"),
    (["main.py", "--learning_rate", "inf"], "argument --learning_rate: expected a positive number"),
    (["main.py", "--bottom_mlp_dims", "64--16"], "argument --bottom_mlp_dims: expected positive integers"),
    (["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--rank_memory", "0"],
     "argument --rank_memory: expected a memory size above 0"),
    (["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "0"],
     "argument --world_size: expected a positive integer, got '0'"),
    (["-m", "dlrm.embedding.planner", "--preset", "nosuch", "--world_size", "2"],
     "argument --preset: invalid choice: 'nosuch'"),
    (["-m", "dlrm.embedding.planner", "--table_rows", "a,b", "--world_size", "2"],
     "argument --table_rows: expected positive integers separated by ','"),
    (["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--optimizer_slots", "-1"],
     "argument --optimizer_slots: expected an integer >= 0"),
    (["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--bytes_per_element", "0"],
     "argument --bytes_per_element: expected a positive integer"),
    (["-m", "dlrm.data.synthetic", "--out", "unused", "--cardinalities", "10,abc"],
     "argument --cardinalities: expected positive integers separated by ','"),
    (["-m", "dlrm.data.synthetic", "--out", "unused", "--seed", "-1"], "argument --seed: expected a seed"),
    (["-m", "dlrm.data.synthetic", "--out", "unused", "--train_rows", "-5"],
     "argument --train_rows: expected a positive integer, got '-5'"),
    (["-m", "dlrm.data.transcode", "--input", "x.yaml", "--output", "o", "--chunk_rows", "0"],
     "argument --chunk_rows: expected a positive integer"),
    (["-m", "dlrm.launch", "--collect", "d", "--timeout_min", "-3"], "argument --timeout_min: expected a positive"),
    (["-m", "dlrm.data.synthetic.lr_baseline", "data", "--epochs", "-1"],
     "argument --epochs: expected a positive integer"),
    (["-m", "preproc_spark3", "raw", "out", "--log_offset", "nan"], "argument --log_offset: expected a positive"),
    (["-m", "preproc_spark3", "raw", "out", "--eval_day", "-1"], "argument --eval_day: expected an integer >= 0"),
    # sizes: one grammar (dlrm.sizes) and one message naming the flag in every CLI
    (["main.py", "--rank_memory", "80 gigs"], "argument --rank_memory: invalid size '80 gigs': expected bytes or"),
    (["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--replicate_threshold", "1x"],
     "argument --replicate_threshold: invalid size '1x'"),
    (["-m", "preproc_spark3", "raw", "out", "--max_partition_bytes", "1x"],
     "--max_partition_bytes: invalid size '1x': expected bytes or"),
    # a flag that would change nothing is refused in every CLI, not only the trainer's
    (["-m", "preproc_spark3", "raw", "out", "--rapids_jar", "r.jar"], "argument --rapids_jar: not used without --gpu"),
    (["-m", "preproc_spark3", "raw", "out", "--no_shuffle", "--seed", "3"],
     "argument --seed: not used with --no_shuffle"),
    (["-m", "preproc_spark3", "raw", "out", "--executor_memory", "8g"],
     "argument --executor_memory: not used by --master local[*] (in local mode the driver runs every task"),
    (["-m", "preproc_spark3", "raw", "out", "--no_shuf"], "unrecognized arguments: --no_shuf"),
    (["-m", "dlrm.launch", "--collect", "d", "--executor", "local"],
     "argument --executor: not used by --collect (it applies to --sweep)"),
    (["-m", "dlrm.launch", "--sweep", "s.yaml", "--executor", "local", "--partition", "p"],
     "argument --partition: not used by --executor local"),
    (["-m", "dlrm.launch", "--sweep", "s.yaml", "--no_wait", "--wait_timeout=9"],
     "argument --wait_timeout: not used with --no_wait"),
    (["-m", "dlrm.data.synthetic", "--out", "unused", "--card", "3"], "unrecognized arguments: --card 3"),
])
def test_bad_flags_exit_2_with_one_message_and_no_traceback(args, message):
    proc = _cli(args)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.count("error:") == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_the_other_clis_take_a_flag_where_it_applies():
    from dlrm.argtypes import typed_flag
    from preproc_spark3.cli import parse_config as preprocess_config

    spark = preprocess_config(["raw", "out", "--master", "spark://head:7077", "--executor_memory", "8g", "--seed", "3"])
    assert (spark.spark.executor_memory, spark.seed) == ("8g", 3)
    assert preprocess_config(["raw", "out", "--master", "local-cluster[2,1,1024]", "--executor_memory", "2g"]) \
        .spark.executor_memory == "2g"  # local-cluster has executors of its own
    assert typed_flag(["--seed=3"], "--seed") and not typed_flag(["--seeds", "3"], "--seed")
    assert not typed_flag(["--out", "x", "--", "--seed"], "--seed")  # after --: a positional argument


def test_parsing_happens_only_when_asked(monkeypatch):
    import importlib
    import sys

    monkeypatch.setattr(sys, "argv", ["main.py", "--definitely-not-a-flag"])
    cli = importlib.reload(importlib.import_module("dlrm.cli"))  # importing must not read sys.argv
    assert cli.parse_config(["--global_batch_size", "7"]).data.global_batch_size == 7  # only explicit argv


def test_debug_adds_the_traceback_of_a_user_error():
    args = ["-m", "dlrm.embedding.planner", "--preset", "t0", "--world_size", "8", "--rank_memory", "16GiB"]
    plain, debug = _cli(args), _cli(args + ["--debug"])
    assert plain.returncode == debug.returncode == 1
    assert "Traceback" not in plain.stderr and len(plain.stderr.splitlines()) == 1, plain.stderr
    assert "Traceback" in debug.stderr and "PlanError" in debug.stderr
    assert debug.stderr.splitlines()[-1] == plain.stderr.splitlines()[-1]


@pytest.mark.multirank
def test_an_error_every_rank_raises_is_printed_once_by_rank_0():
    """Two ranks parse the same bad flags: one message (rank 0's), not one per rank, and no traceback."""
    from tests.support.multirank import run_ranks
    from tests.support.processes import rank_lines

    run = run_ranks(2, ["main.py", "--learning_rate", "nan"], timeout=120)
    assert run.returncode != 0 and not run.timed_out
    lines = rank_lines(run.stdout + "\n" + run.stderr)
    errors = [(rank, text) for rank, text in lines if "error:" in text]
    assert errors == [(0, "main.py: error: argument --learning_rate: expected a positive number, got 'nan' "
                          "(not a finite number)")], run.stderr[-3000:]
    assert not [text for _, text in lines if "Traceback" in text]


def test_every_script_is_a_cli_modules_main_and_runs_as_python_m():
    import importlib
    import inspect

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert len(scripts) == 7
    for name, target in scripts.items():
        module, _, function = target.partition(":")
        assert module.split(".")[-1] == "cli" and function == "main", name
        main = getattr(importlib.import_module(module), function)
        assert list(inspect.signature(main).parameters) == ["argv"], name
        assert inspect.signature(main).parameters["argv"].default is None, name
        package = module.rsplit(".", 1)[0]
        if package != "dlrm":
            assert _cli(["-m", package, "--help"]).returncode == 0, name
    assert _cli(["-m", "dlrm", "--help"]).stdout == _cli(["main.py", "--help"]).stdout
