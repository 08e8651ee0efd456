"""The trainer's presets, partial configs laid over the reference defaults before the flags a user typed.

`--arch widedeep` takes NVIDIA's Wide & Deep defaults (`WIDEDEEP_PRESET`). Without `--dataset_path` the
run uses the embedded synthetic dataset and `DEMO_PRESET` (DLRM, DCNv2) or `WIDEDEEP_DEMO_PRESET`, so
that `python main.py` finishes in a few minutes on a laptop. `configure` is the one place they apply;
flags given explicitly always win over them, and so does the model of the checkpoint that eval and the
inference benchmark read (`dlrm.cli.with_checkpoint_model`).
"""
from __future__ import annotations

from dlrm.config import Config, PartialConfig

# The embedded demo (no --dataset_path): the tiny synthetic preset, a smaller model and batch, and an
# optimizer that converges in one short epoch on 2 CPU cores. Measured in docs/training.md.
DEMO_PRESET = PartialConfig(
    data={"global_batch_size": 2048, "eval_batch_size": 16384},
    model={"embedding_dim": 16, "bottom_mlp": (64, 32, 16), "top_mlp": (256, 128, 1), "cross_projection_dim": 64},
    optimizer={"optimizer": "adam", "learning_rate": 0.01, "warmup_steps": 50, "decay_start_step": 200,
               "decay_steps": 312, "end_learning_rate": 0.001},
    train={"eval_every_steps": 128, "log_every_steps": 20, "run_dir": "runs/demo"},
)

# --arch widedeep: NVIDIA's TF2 Wide & Deep defaults where they differ from the DLRM ones.
WIDEDEEP_PRESET = PartialConfig(
    data={"global_batch_size": 131072, "eval_batch_size": 131072},
    train={"epochs": 20.0, "log_every_steps": 100, "benchmark_warmup_steps": 500, "benchmark_steps": 1000},
)

# The pairs the W&D synthetic generator gives an effect of their own (its `PAIR_FEATURES`; a test keeps
# the two equal): only a crossed feature learns them in the demo's budget.
WIDEDEEP_DEMO_CROSSES = (("advertiser_id", "geo_location"), ("campaign_id", "geo_location_state"),
                         ("source_id_promo", "document_id"))

# --arch widedeep without --dataset_path: the Outbrain-shaped synthetic click log (`widedeep_tiny`, 2.4M
# rows: ~1.6M train, ~800k test) and a model and schedule for a few minutes on 2 CPU cores. FTRL starts
# from a tiny accumulator: under the batch-mean loss Keras' 0.1 leaves the wide part nearly still in so
# short a run. Measured in docs/data.md.
WIDEDEEP_DEMO_PRESET = PartialConfig(
    data={"synthetic_preset": "widedeep_tiny", "synthetic_dir": "data/synthetic_widedeep_tiny",
          "synthetic_train_rows": 1_600_000, "synthetic_test_rows": 800_000,
          "global_batch_size": 4096, "eval_batch_size": 16384},
    model={"deep_hidden_units": (256, 256, 256), "wide_crosses": WIDEDEEP_DEMO_CROSSES},
    optimizer={"linear_learning_rate": 0.3, "linear_initial_accumulator": 1e-6, "deep_learning_rate": 0.002,
               "deep_warmup_epochs": 0.1},
    train={"epochs": 2.5, "eval_every_steps": 1000, "log_every_steps": 50, "run_dir": "runs/widedeep_demo"},
)

# The presets a flag's help shows beside its default, by the name it shows them under.
SHOWN_PRESETS = (("demo", DEMO_PRESET), ("widedeep", WIDEDEEP_PRESET), ("widedeep demo", WIDEDEEP_DEMO_PRESET))

# A deep-only model has no wide part, so none of the demo's crosses.
_DEEP_ONLY = PartialConfig(model={"wide_crosses": ()})


def presets_for(flags: PartialConfig) -> tuple[PartialConfig, ...]:
    """The presets the typed `flags` call for, in the order they apply."""
    widedeep = flags.get("model", "arch") == "widedeep"
    chosen = [WIDEDEEP_PRESET] if widedeep else []
    if flags.get("data", "dataset_dir") is None:
        chosen.append(WIDEDEEP_DEMO_PRESET if widedeep else DEMO_PRESET)
    if flags.get("model", "model_type") == "deep":
        chosen.append(_DEEP_ONLY)
    return tuple(chosen)


def configure(flags: PartialConfig) -> Config:
    """The reference defaults, then the presets the flags call for, then the flags themselves."""
    config = Config()
    for layer in (*presets_for(flags), flags):
        config = layer.applied_to(config)
    return config
