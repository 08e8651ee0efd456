"""The export: checkpoint -> one-process model with the restored weights -> SavedModel (+ ONNX), atomically.

The model is built from the checkpoint's recorded configuration (`train.build.serving_parts`: one process,
tables whole, zeros until restored, no placement plan) and restored by the trainer's restore
(`train.checkpoint.restore`): a one-process `LocalEmbedding` restore assembles every table from the pieces any
world size wrote, and no optimizer state is read.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from typing import Callable, Optional

import tensorflow as tf

from dlrm.config import ExportConfig
from dlrm.data.format.contract import contract_from_spec
from dlrm.data.format.feature_spec import SPEC_FILE_NAME
from dlrm.export.fits import check_fits_one_host
from dlrm.export.inputs import ServingLayout
from dlrm.export.onnx_model import check_onnx_size, write_onnx
from dlrm.export.serving import serving_module
from dlrm.export.source import describe, load_source
from dlrm.output_dir import OutputDir
from dlrm.train.build import serving_parts
from dlrm.train.checkpoint.restore import restore

SIGNATURE = "serving_default"
LAYOUT_FILE = "serving_inputs.json"
ONNX_FILE = "model.onnx"


@dataclass(frozen=True)
class ExportResult:
    out: str
    checkpoint: str
    step: int
    table_bytes: int
    onnx: Optional[str]
    seconds: float


def saved_model_dir(out: str, flag: str = "--out") -> OutputDir:
    """A SavedModel's output directory: `python -m dlrm.export --out` (which has --overwrite) or
    `main.py --saved_model_output_path` (which has not)."""
    overwrite_flag = "--overwrite" if flag == "--out" else None
    return OutputDir(out, flag, "SavedModel", "saved_model.pb", overwrite_flag=overwrite_flag)


def export(cfg: ExportConfig, log: Callable[[str], None] = print, flag: str = "--out") -> ExportResult:
    """Write the SavedModel of checkpoint `cfg.checkpoint` to `cfg.out` (given as `flag`); raises OutputDirError /
    ExportError / CheckpointError / SpecError with one message (checked in this order: output, checkpoint,
    feature spec, size)."""
    started = time.perf_counter()
    output = saved_model_dir(cfg.out, flag)
    output.check(cfg.overwrite)
    source = load_source(cfg.checkpoint, cfg.dataset_dir)
    model_cfg = source.config.model
    contract = contract_from_spec(source.spec, model_cfg.embedding_dim, model_cfg.combiner)
    need = check_fits_one_host(contract, cfg.max_memory_bytes)
    if cfg.onnx:
        check_onnx_size(need)
    layout = ServingLayout(contract)
    parts = serving_parts(source.config, source.spec)
    restore(parts, source.directory, training=False, verified=True)
    module = serving_module(parts.model, layout)
    onnx_path = None
    with output.staged(cfg.overwrite) as tmp:
        tf.saved_model.save(module, tmp, signatures={SIGNATURE: module.serve.get_concrete_function()})
        assets = os.path.join(tmp, "assets")
        os.makedirs(assets, exist_ok=True)
        shutil.copyfile(os.path.join(source.spec_dir, SPEC_FILE_NAME), os.path.join(assets, SPEC_FILE_NAME))
        with open(os.path.join(assets, LAYOUT_FILE), "w", encoding="utf-8") as f:
            json.dump(dict(layout.describe(), source=describe(source)), f, indent=1)
        if cfg.onnx:
            write_onnx(module.serve, layout, os.path.join(tmp, ONNX_FILE))
            onnx_path = os.path.join(os.path.abspath(cfg.out), ONNX_FILE)
    result = ExportResult(out=os.path.abspath(cfg.out), checkpoint=source.directory, step=source.step,
                          table_bytes=need, onnx=onnx_path, seconds=time.perf_counter() - started)
    log(f"exported {source.config.model.arch} of {source.directory} (step {source.step}, written by "
        f"{source.world_size} rank(s)) to {result.out} in {result.seconds:.1f} s")
    return result
