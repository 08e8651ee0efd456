"""`--predictions_path`: every evaluated row's group id, label, logit and probability as a CSV file.

A plain CSV with a header (`group_id,label,logit,probability`), readable without this package, one row per
test row in dataset order whatever the world size. `group_id` is empty without a `map` channel; `label` is
0 or 1; `logit` is the model's float32 output in the shortest text that reads back to the same float32;
`probability` is sigmoid(logit) computed in float64 (shortest round-trip text), so it does not saturate
to 1 where float32 would. The file is written by rank 0 to a temp file and renamed (`dlrm.atomic`).
"""
from __future__ import annotations

import os
import uuid
from typing import Optional

import numpy as np

from dlrm.atomic import describe_os_error, replaced_atomically
from dlrm.errors import PathError

HEADER = ("group_id", "label", "logit", "probability")
FLAG = "--predictions_path"


class PredictionsPathError(PathError):
    """The predictions file cannot be written; rank 0 found out and every rank stops with this error."""

    on_every_rank = True


def _message(path: str, reason: str) -> str:
    return f"cannot write the predictions file {path} ({FLAG}): {reason}"


def path_problem(path: str) -> Optional[str]:
    """Why `path` cannot be written (None if it can): tried with a real file in its directory, so a missing
    or read-only directory is found before evaluating, not after."""
    if os.path.isdir(path):
        return _message(path, "it is a directory")
    probe = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.probe.{uuid.uuid4().hex}")
    try:
        with open(probe, "x"):
            pass
        os.unlink(probe)
    except OSError as error:
        error.filename = None  # the probe's name means nothing to the user
        return _message(path, describe_os_error(error))
    return None


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    """Stable in float64 for any logit (no overflow of exp for large |z|)."""
    z = logits.astype(np.float64)
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def write_predictions(path: str, labels: np.ndarray, logits: np.ndarray, groups: Optional[np.ndarray]) -> None:
    """Write the CSV atomically (see the module docstring). Raises PredictionsPathError if it cannot."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    logits = np.asarray(logits, np.float32).reshape(-1)
    group_column = pa.nulls(logits.size, pa.int64()) if groups is None else pa.array(np.asarray(groups, np.int64))
    table = pa.table({"group_id": group_column, "label": pa.array(np.asarray(labels).reshape(-1).astype(np.int8)),
                      "logit": pa.array(logits), "probability": pa.array(_sigmoid(logits))})
    try:
        with replaced_atomically(path) as f:
            f.write((",".join(HEADER) + "\n").encode())  # unquoted, which pyarrow's own header is not
            pa_csv.write_csv(table, f, pa_csv.WriteOptions(include_header=False))
    except OSError as error:
        raise PredictionsPathError(_message(path, describe_os_error(error))) from None
