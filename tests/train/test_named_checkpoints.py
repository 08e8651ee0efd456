"""Checkpoints key tables by name: a run resumes from one, and from one of the old positional layout
(format 1, `embedding/t<i>`) alike; a renamed table or a changed dim is refused naming the table."""
import json
import os
import shutil

import pytest

from dlrm.cli import parse_config
from dlrm.train import checkpoint
from dlrm.train.run import run
from tests.support.runs import SMALL, assert_same_final_weights

STEPS = 4


@pytest.fixture(scope="module")
def synthetic_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("data") / "synthetic")


def _run(synthetic_dir, run_dir, *flags):
    config = parse_config(["--synthetic_dir", synthetic_dir, "--run_dir", str(run_dir), *SMALL, "--optimizer", "adam",
                           "--learning_rate", "0.01", *flags])
    return run(config)


@pytest.fixture(scope="module")
def reference(synthetic_dir, tmp_path_factory):
    """A run of STEPS steps with a checkpoint half way: (its checkpoint root, the half-way checkpoint)."""
    root = tmp_path_factory.mktemp("reference")
    _run(synthetic_dir, root / "run", "--max_steps", str(STEPS), "--checkpoint_every", str(STEPS // 2),
         "--save_checkpoint_path", str(root / "ckpt"))
    return str(root / "ckpt"), str(root / "ckpt" / checkpoint.step_dir_name(STEPS // 2))


def _root_with(step_dir, root):
    """A checkpoint root holding a copy of `step_dir` as its latest checkpoint."""
    name = os.path.basename(step_dir)
    shutil.copytree(step_dir, os.path.join(root, name))
    with open(os.path.join(root, checkpoint.LATEST), "w") as f:
        f.write(name + "\n")
    return str(root)


def to_format_1(step_dir):
    """Rewrite a checkpoint in the layout written before tables had names: `embedding/t<i>`, meta with
    positional `table_sizes` and one `embedding_dim`, format 1."""
    meta = checkpoint.read_meta(step_dir)
    for i, name in enumerate(meta.pop("table_names")):
        os.rename(os.path.join(step_dir, "embedding", name), os.path.join(step_dir, "embedding", f"t{i}"))
    shape = meta["model_shape"]
    tables = shape.pop("tables")
    assert shape.pop("num_numerical") == 13 and {t["dim"] for t in tables} == {8}
    shape.update(table_sizes=[t["rows"] for t in tables], embedding_dim=8)
    meta["format_version"] = 1
    os.remove(os.path.join(step_dir, checkpoint.MANIFEST))  # format 1 had none
    with open(os.path.join(step_dir, checkpoint.META), "w") as f:
        json.dump(meta, f)


def test_checkpoint_layout_names_the_tables(reference):
    root, half_way = reference
    meta = checkpoint.read_meta(half_way)
    names = [f"cat_{i}" for i in range(26)]
    assert meta["format_version"] == 3 and meta["table_names"] == names
    assert [t["name"] for t in meta["model_shape"]["tables"]] == names and meta["model_shape"]["num_numerical"] == 13
    assert {(t["dim"], t["hotness"], t["combiner"]) for t in meta["model_shape"]["tables"]} == {(8, 1, "sum")}
    assert sorted(os.listdir(os.path.join(half_way, "embedding"))) == sorted(names)
    arrays = checkpoint.read_arrays(half_way)
    assert arrays["embedding/cat_3/value"].shape == (meta["model_shape"]["tables"][3]["rows"], 8)


@pytest.mark.parametrize("layout", ["by_name", "format_1"])
def test_resume_from_a_named_or_an_old_layout_checkpoint_ends_bit_identical(synthetic_dir, reference, tmp_path,
                                                                           layout):
    full_run, half_way = reference
    root = _root_with(half_way, tmp_path / "ckpt")
    if layout == "format_1":
        to_format_1(os.path.join(root, os.path.basename(half_way)))
        assert checkpoint.read_arrays(root)["embedding/t0/value"].shape[1] == 8  # still readable as it is
    result = _run(synthetic_dir, tmp_path / "run", "--max_steps", str(STEPS), "--checkpoint_every", str(STEPS // 2),
                  "--save_checkpoint_path", root)
    assert result.step == STEPS
    assert_same_final_weights(full_run, root, step=STEPS)  # the resumed run writes tables by name


def test_a_changed_dim_is_refused_naming_the_table(synthetic_dir, reference, tmp_path):
    _, half_way = reference
    for layout in ("by_name", "format_1"):
        root = _root_with(half_way, tmp_path / layout)
        if layout == "format_1":
            to_format_1(os.path.join(root, os.path.basename(half_way)))
        with pytest.raises(checkpoint.CheckpointError, match=r"different model: table 'cat_0' has dim 8 there and 4 "
                                                             r"here; use a matching configuration"):
            _run(synthetic_dir, tmp_path / "run", "--max_steps", str(STEPS), "--restore_checkpoint_path", root,
                 "--embedding_dim", "4", "--bottom_mlp_dims", "16-4")


def test_a_renamed_table_is_refused_naming_both_names(synthetic_dir, reference, tmp_path):
    import yaml

    _, half_way = reference
    renamed = str(tmp_path / "renamed")
    shutil.copytree(synthetic_dir, renamed)
    path = os.path.join(renamed, "feature_spec.yaml")
    spec = yaml.safe_load(open(path))
    spec["feature_spec"]["topics"] = spec["feature_spec"].pop("cat_3")
    spec["channel_spec"]["categorical"][3] = "topics"
    for chunks in spec["source_spec"].values():
        for chunk in chunks:
            chunk["features"] = ["topics" if name == "cat_3" else name for name in chunk["features"]]
    with open(path, "w") as f:
        yaml.safe_dump(spec, f)
    with pytest.raises(checkpoint.CheckpointError, match=r"its table 3 is 'cat_3' and this model's is 'topics' \(a "
                                                         r"categorical feature renamed, added, removed or moved\)"):
        _run(synthetic_dir, tmp_path / "run", "--dataset_path", renamed, "--max_steps", str(STEPS),
             "--restore_checkpoint_path", half_way)
