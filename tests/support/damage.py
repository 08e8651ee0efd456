"""Damaging a checkpoint's files as a disk, a copy or a bad write would, for the verification tests."""
import os
from typing import Dict, List

import numpy as np

from dlrm.train.checkpoint import MANIFEST, META

# The kinds of file of a checkpoint written with an optimizer slot `accumulator`, by a path glob's pieces.
KINDS = ("dense", "piece", "slot", "meta", "manifest")
WAYS = ("flipped", "truncated", "nan")


def cases() -> List[tuple]:
    """(kind, way) of every damage that applies: NaN only to arrays."""
    return [(kind, way) for kind in KINDS for way in WAYS if not (way == "nan" and kind in ("meta", "manifest"))]


def file_of(step_dir: str, kind: str) -> str:
    """The relative path of the first file of `kind` in the checkpoint `step_dir`."""
    if kind in ("meta", "manifest"):
        return {"meta": META, "manifest": MANIFEST}[kind]
    if kind == "dense":
        return os.path.join("dense", sorted(os.listdir(os.path.join(step_dir, "dense")))[0])
    slot = "value" if kind == "piece" else "accumulator"
    tables = sorted(os.listdir(os.path.join(step_dir, "embedding")))
    pieces = sorted(os.listdir(os.path.join(step_dir, "embedding", tables[0], slot)))
    return os.path.join("embedding", tables[0], slot, pieces[-1])


def damage(step_dir: str, kind: str, way: str) -> str:
    """Damage the file of `kind` in `step_dir` in `way`; returns its path."""
    path = os.path.join(step_dir, file_of(step_dir, kind))
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if way == "flipped":
        data[len(data) - 3] ^= 0x01  # in the data of an array, in a number or a bracket of a JSON file
    elif way == "truncated":
        data = data[:len(data) - len(data) // 4]  # the last quarter lost (an .npy header stays whole)
    else:
        array = np.load(path, allow_pickle=False)
        np.save(path, np.full_like(array, np.nan))
        return path
    with open(path, "wb") as f:
        f.write(bytes(data))
    return path


def as_format_2(step_dir: str) -> None:
    """Make `step_dir` look like a checkpoint written before manifests (format 2)."""
    import json

    os.remove(os.path.join(step_dir, MANIFEST))
    with open(os.path.join(step_dir, META)) as f:
        meta: Dict = json.load(f)
    meta["format_version"] = 2
    with open(os.path.join(step_dir, META), "w") as f:
        json.dump(meta, f)
