"""The trainer's command line: flags -> `Config`, the only place where flags become configuration.

The flags are declared in one table (`dlrm.cli_flags`: NVIDIA's flag names, each with the `Config` field
it sets) and the presets in `dlrm.cli_presets`; defaults are the reference configuration (`dlrm.config`).
Every flag is declared with `argparse.SUPPRESS` as its default, so the parsed namespace holds only the
flags the user actually typed; they become a `PartialConfig` laid over the presets they call for.

`main` runs it: `main.py`, `python -m dlrm` and the `dlrm-train` script.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
from typing import Optional, Sequence

from dlrm.argtypes import ArgumentParser, show_default
from dlrm.checkpoint_layout import META, CheckpointError, recorded_config, restore_source
from dlrm.cli_flags import FLAG_GROUPS, FLAGS_BY_NAME, FieldPath, Flag, not_applying, run_name
from dlrm.cli_presets import SHOWN_PRESETS, configure
from dlrm.config import Config, ModelConfig, PartialConfig, TrainConfig

DESCRIPTION = ("Train / evaluate DLRM, DCNv2 or Wide & Deep on a split-binary dataset. Without --dataset_path, "
               "a small synthetic dataset is generated and the demo preset is used.")


def _shown(flag: Flag, value: object) -> str:
    """A value of `flag` as a user would type it."""
    return show_default(value, " " if flag.several else "-")


def _help(flag: Flag, defaults: Config) -> str:
    """The flag's help with its default and the value each preset gives it, as a user would type them."""
    section, name = flag.fields[0]
    shown = [("default", getattr(getattr(defaults, section), name))]
    shown += [(label, preset.get(section, name)) for label, preset in SHOWN_PRESETS
              if name in getattr(preset, section)]
    return f"{flag.help} (" + "; ".join(f"{label}: {_shown(flag, value)}" for label, value in shown) + ")"


def _add(group, flag: Flag, defaults: Config) -> None:
    kwargs: dict[str, object] = {"dest": flag.dest, "help": _help(flag, defaults)}
    if flag.const is not None:
        kwargs.update(action="store_const", const=flag.const)
    elif flag.switch:
        kwargs["action"] = "store_true"
    else:
        kwargs["type"] = flag.type or str
        if flag.several:
            kwargs["nargs"] = "+"
        if flag.choices:
            kwargs["choices"] = flag.choices
    group.add_argument(flag.name, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The parser of the flag table, every flag defaulting to absent (`argparse.SUPPRESS`)."""
    parser = ArgumentParser(prog="main.py", description=DESCRIPTION, argument_default=argparse.SUPPRESS)
    defaults = Config()
    for group in FLAG_GROUPS:
        section = parser.add_argument_group(group.title)
        for flag in group.flags:
            _add(section, flag, defaults)
    return parser


FLAGS_BY_DEST = {flag.dest: flag for flag in FLAGS_BY_NAME.values()}


def typed_flags(given: dict[str, object], parser: argparse.ArgumentParser) -> PartialConfig:
    """The flags a user typed (argparse dest -> value) as the fields they set; two flags setting one field to
    different values (`--mode train --evaluate`, `--epochs 2 --num_epochs 3`) are refused."""
    sections: dict[str, dict[str, object]] = {}
    set_by: dict[FieldPath, str] = {}
    for dest, value in given.items():
        flag = FLAGS_BY_DEST[dest]
        for field in flag.fields:
            value = tuple(value) if isinstance(value, list) else value
            section = sections.setdefault(field[0], {})
            if field in set_by and section[field[1]] != value:
                parser.error(f"argument {flag.name}: contradicts {set_by[field]} (both set {'.'.join(field)})")
            set_by.setdefault(field, flag.name)
            section[field[1]] = value
    return PartialConfig(**sections)


# The modes that read a checkpoint's weights into a model they build, and so take its model from the checkpoint.
MODES_TAKING_THE_CHECKPOINTS_MODEL = ("eval", "inference_benchmark")
# What a checkpoint records of its model but evaluation does not take: the initialisers' seed (the
# checkpoint's weights replace whatever it draws).
_NOT_TAKEN = ("seed",)


def with_checkpoint_model(flags: PartialConfig, given: dict[str, object],
                          parser: argparse.ArgumentParser) -> PartialConfig:
    """`flags` with the model of the checkpoint that --mode eval / inference_benchmark reads (its meta.json's
    configuration: arch, model type, dims, crosses): the architecture flags need not be typed again, and a
    typed one that contradicts the checkpoint is refused naming both values. Other modes, no checkpoint, or a
    checkpoint recording no configuration (not written by this trainer): `flags` unchanged, and the restore
    compares the model built from the flags with the checkpoint's."""
    mode = flags.get("train", "mode", TrainConfig.mode)
    if mode not in MODES_TAKING_THE_CHECKPOINTS_MODEL:
        return flags
    try:
        source = restore_source(dataclasses.replace(TrainConfig(), **flags.train))
    except CheckpointError:
        return flags  # none at --restore_checkpoint_path: the mode says so when it looks for one
    if source is None:
        return flags
    config = recorded_config(source)
    if config is None:
        return flags
    model = config.model
    recorded = {item.name: getattr(model, item.name) for item in dataclasses.fields(ModelConfig)
                if item.name not in _NOT_TAKEN}
    for dest in given:
        flag = FLAGS_BY_DEST[dest]
        if not_applying(flag, model.arch, model.model_type, mode):
            continue  # refused as a flag of another model (`_refuse_flags_that_do_not_apply`)
        for section, name in flag.fields:
            typed = flags.get(section, name)
            if section == "model" and name in recorded and json.dumps(typed) != json.dumps(recorded[name]):
                parser.error(f"argument {flag.name}: {_shown(flag, typed)} contradicts the checkpoint's "
                             f"{_shown(flag, recorded[name])} ({os.path.join(source, META)}); --mode {mode} takes "
                             f"the model from the checkpoint: leave {flag.name} out")
    return dataclasses.replace(flags, model={**recorded, **flags.model})


def _refuse_flags_that_do_not_apply(given: dict[str, object], config: Config,
                                    parser: argparse.ArgumentParser) -> None:
    """A typed flag outside the archs, Wide & Deep model types or runs it is declared for (`cli_flags`), or
    without the flag it needs, would be ignored: it is refused instead, naming where it applies."""
    run = run_name(config.train.mode, config.train.benchmark)
    for dest in given:
        flag = FLAGS_BY_DEST[dest]
        reason = not_applying(flag, config.model.arch, config.model.model_type, run)
        if reason:
            parser.error(f"argument {flag.name}: {reason}")
        if flag.needs and not given.get(FLAGS_BY_NAME[flag.needs].dest):  # an empty path is none
            parser.error(f"argument {flag.name}: not used without {flag.needs}")


def _validate(config: Config, parser: argparse.ArgumentParser) -> None:
    for problem in config.model.problems() + config.optimizer.problems():
        parser.error(problem)
    model, optim, train = config.model, config.optimizer, config.train
    if model.arch == "widedeep" and model.model_type != "wide" and train.mode == "train" \
            and optim.deep_warmup_epochs > train.epochs:
        parser.error(f"--deep_warmup_epochs ({optim.deep_warmup_epochs:g}) must not exceed --num_epochs "
                     f"({train.epochs:g}): the deep learning-rate schedule is laid out over the epochs")
    if train.benchmark and train.mode != "train":
        parser.error(f"--benchmark times training steps; it cannot be combined with --mode {train.mode}")
    if config.train.mode == "eval" and not config.train.restore_checkpoint_path \
            and not config.train.save_checkpoint_path:
        parser.error("--mode eval needs --restore_checkpoint_path (or --save_checkpoint_path holding a checkpoint)")


def parse_config(argv: Optional[Sequence[str]] = None) -> Config:
    """Flags -> Config: reference defaults, then the presets the flags call for, then the flags typed (with the
    model of the checkpoint an evaluation reads)."""
    parser = build_parser()
    given = vars(parser.parse_args(list(argv) if argv is not None else None))
    config = configure(with_checkpoint_model(typed_flags(given, parser), given, parser))
    _refuse_flags_that_do_not_apply(given, config, parser)
    _validate(config, parser)
    return config


def train(argv: Sequence[str]) -> int:
    """Run the configured mode; with `--saved_model_output_path`, the export follows (the trainer does not
    import `dlrm.export`: the entry point chains the two)."""
    config = parse_config(argv)
    # Imported late: a bad command line is refused before the trainer loads (and bad data before TensorFlow
    # does: `dlrm.train.run`); the export, which loads TensorFlow, only when asked for.
    from dlrm.train.run import run

    export_to = config.train.saved_model_output_path
    if export_to:
        from dlrm.export.after_training import ExportAfterTraining

        run(config, after_training=ExportAfterTraining(export_to))
    else:
        run(config)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Train or evaluate; errors are reported by `dlrm.cli_errors.run_main` (see main.py for exit statuses)."""
    from dlrm.cli_errors import run_main

    return run_main(train, argv)
