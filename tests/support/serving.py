"""The proof of an export: the SavedModel scored in a fresh process that imports TensorFlow only, on the
test rows read straight from the split-binary files, against the trainer's own scores of the same
checkpoint.

`trainer_predictions` is the one place that asks the trainer for its scores: `main.py --mode eval
--predictions_path CSV` on the checkpoint, the file a user would read.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import textwrap
from typing import Optional

import numpy as np
import yaml

from tests.support.multirank import memoised, run_single, scratch_dir

# One request per line on stdin (model directory, inputs, output, ONNX or not); the output's path on stdout
# once it is written. Every request checks again that no module of this repository has been loaded.
FRESH_SCORER = textwrap.dedent('''
    import json
    import sys
    import numpy as np
    import tensorflow as tf

    for line in sys.stdin:
        model_dir, inputs_path, out_path, with_onnx = json.loads(line)
        inputs = dict(np.load(inputs_path))
        serve = tf.saved_model.load(model_dir).signatures["serving_default"]
        result = {name: value.numpy()
                  for name, value in serve(**{k: tf.constant(v) for k, v in inputs.items()}).items()}
        if with_onnx:
            import onnxruntime
            session = onnxruntime.InferenceSession(model_dir + "/model.onnx")
            names = [output.name for output in session.get_outputs()]
            for name, value in zip(names, session.run(None, inputs)):
                result["onnx_" + name] = value
        ours = sorted(m for m in sys.modules if m.split(".")[0] in ("dlrm", "tests"))
        assert not ours, ours
        result["dlrm_imported"] = np.array("dlrm" in sys.modules)
        np.savez(out_path, **result)
        print(out_path, flush=True)
''')
SCORE_TIMEOUT = 240


def trainer_predictions(dataset: str, checkpoint: str) -> dict:
    """{"labels", "logits"} of the test mapping in dataset order, as `main.py --mode eval` scores `checkpoint`
    (its --predictions_path: group_id,label,logit,probability per row, dataset order); once per session for
    each checkpoint, however many of its exports are compared."""
    return memoised(("trainer_predictions", dataset, checkpoint), lambda: _eval_mode_predictions(dataset, checkpoint))


def _eval_mode_predictions(dataset: str, checkpoint: str) -> dict:
    work = scratch_dir("trainer_predictions_")
    out = os.path.join(work, "predictions.csv")
    run_single(["main.py", "--dataset_path", dataset, "--restore_checkpoint_path", checkpoint, "--mode", "eval",
                "--predictions_path", out, "--run_dir", os.path.join(work, "run"), "--intra_op_threads", "2"],
               timeout=240).check()
    table = np.genfromtxt(out, delimiter=",", names=True, dtype=np.float64)
    return {"labels": table["label"].astype(np.float32), "logits": table["logit"].astype(np.float32)}


def _read_feature(spec: dict, base: str, mapping: str, feature: str) -> np.ndarray:
    """[rows, width] of `feature` from its split-binary file (docs/data.md: fixed-size records, native order)."""
    for source in spec["source_spec"][mapping]:
        if feature in source["features"]:
            dtypes = {spec["feature_spec"][f]["dtype"] for f in source["features"]}
            assert len(dtypes) == 1 and len(source["files"]) == 1
            width = spec["feature_spec"][feature].get("max_hotness", 1) if len(source["features"]) == 1 \
                else len(source["features"])
            array = np.fromfile(os.path.join(base, source["files"][0]), dtype=dtypes.pop()).reshape(-1, width)
            return array if len(source["features"]) == 1 else array[:, source["features"].index(feature)][:, None]
    raise KeyError(feature)


def serving_inputs_from_files(saved_model: str, dataset: str, mapping: str = "test") -> dict:
    """The serving inputs of every row of `mapping`, built from the files by the names the SavedModel's
    serving_inputs.json gives (not by the package's own batch code), and the labels."""
    with open(os.path.join(saved_model, "assets", "serving_inputs.json")) as f:
        layout = json.load(f)
    with open(os.path.join(dataset, "feature_spec.yaml")) as f:
        spec = yaml.safe_load(f)
    inputs = {}
    for item in layout["inputs"]:
        columns = [_read_feature(spec, dataset, mapping, name) for name in item["features"]]
        inputs[item["name"]] = np.concatenate(columns, axis=1).astype(item["dtype"])
    label = spec["channel_spec"]["label"][0]
    return {"inputs": inputs, "labels": _read_feature(spec, dataset, mapping, label).reshape(-1).astype(np.float32)}


class FreshScorer:
    """The SavedModel's (and ONNX's) outputs on given inputs, computed by one `python -I` process started in an
    empty directory with no PYTHONPATH: it can import TensorFlow (and onnxruntime) but not this repository.
    Started at the first `score` and kept for the next ones, so that TensorFlow is imported once."""

    def __init__(self) -> None:
        self.process: Optional[subprocess.Popen] = None
        self.work = ""
        self.requests = 0

    def _started(self) -> subprocess.Popen:
        if self.process is None:
            self.work = scratch_dir("fresh_scorer_")
            script = os.path.join(self.work, "score.py")
            with open(script, "w") as f:
                f.write(FRESH_SCORER)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["TF_CPP_MIN_LOG_LEVEL"] = "2"
            with open(os.path.join(self.work, "stderr.txt"), "w") as stderr:
                self.process = subprocess.Popen([sys.executable, "-I", script], cwd=self.work, env=env,
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                                text=True)
        return self.process

    def score(self, saved_model: str, inputs: dict, with_onnx: bool = False) -> dict:
        process = self._started()
        assert process.stdin is not None and process.stdout is not None
        self.requests += 1
        inputs_path, out = (os.path.join(self.work, f"{name}_{self.requests}.npz") for name in ("inputs", "out"))
        np.savez(inputs_path, **inputs)
        try:
            process.stdin.write(json.dumps([saved_model, inputs_path, out, with_onnx]) + "\n")
            process.stdin.flush()
        except BrokenPipeError:
            pass  # it has exited: its stderr says why
        answered = select.select([process.stdout], [], [], SCORE_TIMEOUT)[0]
        line = process.stdout.readline() if answered else ""
        if line.strip() != out:
            self.close()
            with open(os.path.join(self.work, "stderr.txt")) as f:
                raise AssertionError(f"the fresh scorer did not answer ({'timed out' if not answered else line!r})"
                                     f": {f.read()[-4000:]}")
        return dict(np.load(out))

    def close(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


def compare(scorer: FreshScorer, saved_model: str, dataset: str, checkpoint: str, with_onnx: bool = False) -> dict:
    """Max abs differences of the fresh process's logits and probabilities from the trainer's scores of the
    checkpoint the SavedModel was exported from, per output."""
    rows = serving_inputs_from_files(saved_model, dataset)
    want = trainer_predictions(dataset, checkpoint)
    got = scorer.score(saved_model, rows["inputs"], with_onnx)
    assert not bool(got["dlrm_imported"])
    np.testing.assert_array_equal(rows["labels"], want["labels"])  # the same rows, in the same order
    probability = 1.0 / (1.0 + np.exp(-want["logits"].astype(np.float64)))
    differences = {"rows": len(want["logits"]),
                   "logit": float(np.max(np.abs(got["logit"] - want["logits"]))),
                   "probability": float(np.max(np.abs(got["probability"] - probability)))}
    if with_onnx:
        differences["onnx_logit"] = float(np.max(np.abs(got["onnx_logit"] - want["logits"])))
        differences["onnx_probability"] = float(np.max(np.abs(got["onnx_probability"] - probability)))
    return differences
