"""The training-throughput benchmarks run end to end at a tiny size and write their reports: every candidate
measured, the headline ratios finite, and the bfloat16 caveat present exactly when this CPU has no bfloat16
instructions; the W&D step profile puts its op time in classes; every part of the interaction gets a time and
an ideal; on x86 every report says that TensorFlow's oneDNN kernels were on. Their figures are not checked
(benchmarks/, not tests, hold speed); that they run is."""
import json
import math
import platform
import subprocess
import sys

import pytest

from dlrm.cpu_info import cpu_flags, native_bf16
from tests.support import ROOT

TINY = ["--max_rows", "64", "--batch_size", "32", "--window_seconds", "0.05", "--rounds", "1"]
# XLA compiles take most of a tiny run's time; the --xla variants are the same steps, compiled.
SKIP_XLA = ["--skip", "ours_fp32_xla", "ours_amp_xla", "keras_fit_fp32_jit", "ours_widedeep_train_xla",
            "ours_widedeep_predict_xla"]


@pytest.mark.slow
def test_train_and_widedeep_throughput_benchmarks_write_their_reports(tmp_path):
    train_json, widedeep_json, profile_json, parts_json = (
        tmp_path / name for name in ("train.json", "widedeep.json", "prof.json", "parts.json"))
    script = ("import sys; "
              "from benchmarks import interaction_parts, step_profile, train_throughput, widedeep_throughput; "
              "train_throughput.main(sys.argv[5:] + ['--output', sys.argv[1]]); "
              "widedeep_throughput.main(sys.argv[5:] + ['--output', sys.argv[2]]); "
              "step_profile.main(['--arch', 'widedeep', '--batch_size', '32', '--max_rows', '64', '--steps', '2', "
              "'--warmup', '1', '--rate_seconds', '0.1', '--output', sys.argv[3]]); "
              "interaction_parts.main(['--batch_size', '32', '--window_seconds', '0.02', '--rounds', '1', "
              "'--rate_seconds', '0.1', '--output', sys.argv[4]])")
    done = subprocess.run([sys.executable, "-c", script, str(train_json), str(widedeep_json), str(profile_json),
                           str(parts_json), *TINY, *SKIP_XLA], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    native = native_bf16(cpu_flags())
    train = json.loads(train_json.read_text())
    assert {c["name"] for c in train["candidates"]} >= {"ours_fp32", "ours_amp", "keras_fit_fp32", "keras_fit_bf16",
                                                        "ceiling_gemm_float32", "ceiling_gemm_bfloat16"}
    ratios = train["ratios_best_window"]
    assert all(math.isfinite(ratios[k]) and ratios[k] > 0 for k in
               ("best_ours_fp32_vs_best_keras_fp32", "ours_amp_vs_ours_fp32", "ours_amp_vs_best_keras_bf16"))
    assert train["machine"]["native_bf16"] == native

    widedeep = json.loads(widedeep_json.read_text())
    assert {c["name"] for c in widedeep["candidates"]} == {
        "ours_widedeep_train", "ours_widedeep_predict", "ours_widedeep_train_amp", "ours_widedeep_predict_amp",
        "keras_widedeep_fit", "keras_widedeep_predict",
        "keras_widedeep_fit_bf16", "keras_widedeep_predict_bf16", "ceiling_gemm_float32", "ceiling_gemm_bfloat16"}
    headline = widedeep["ratios"]["best_window"]
    assert all(math.isfinite(headline[k]) and headline[k] > 0 for k in
               ("ours_train_vs_best_keras_train", "ours_amp_train_vs_keras_bf16_train",
                "ours_amp_train_vs_ours_fp32_train"))

    profile = json.loads(profile_json.read_text())
    assert profile["settings"]["arch"] == "widedeep" and set(profile["variants"]) == {"fp32", "amp"}
    for variant in profile["variants"].values():
        assert variant["class_seconds"]["mlp_gemm"] > 0 and variant["class_seconds"]["embedding"] > 0, variant
        assert set(variant["ideal_seconds"]) == {"mlp_gemm", "embedding"}
    assert profile_json.with_suffix(".md").read_text().startswith("Where the training step's time goes, Wide & Deep")

    parts = json.loads(parts_json.read_text())
    for rows in parts["dtypes"].values():
        assert len(rows) == 10 and all(row["seconds"] > 0 and row["ideal_seconds"] > 0 for row in rows), rows
    assert set(parts["dtypes"]) == {"float32", "bfloat16"}

    for report in (train_json, widedeep_json):
        table = report.with_suffix(".md").read_text()
        assert ("This CPU has no bfloat16 instructions" in table) == (not native), table

    if platform.machine() in ("x86_64", "AMD64"):  # the kernels the trainer runs (dlrm/__init__.py), baselines too
        for report in (train_json, widedeep_json, profile_json, parts_json):
            assert json.loads(report.read_text())["machine"]["onednn"] is True, report
            assert "(oneDNN on)" in report.with_suffix(".md").read_text(), report


def test_skipped_candidates_leave_their_ratios_out_of_the_training_report():
    """`--skip` of the Keras baselines and the ceilings (an A/B of our step alone) still gives a report."""
    from benchmarks.train_throughput import Candidate, ratios_for

    def ours(name: str) -> Candidate:
        return Candidate(name, "ours", run=lambda steps: steps)

    both = ratios_for({"ours_fp32": 10.0, "ours_amp": 18.0}, [ours("ours_fp32"), ours("ours_amp")])
    assert both == {"best": {"ours": "ours_amp", "ours_fp32": "ours_fp32"}, "ours_amp_vs_ours_fp32": 1.8}
    assert ratios_for({"ours_amp": 18.0}, [ours("ours_amp")]) == {"best": {"ours": "ours_amp"}}
