"""What CI's second lane (the Horovod stack: TensorFlow 2.15 + Horovod, `make STACK=horovod
test-horovod-lane`) runs besides the first lane's whole suite on the current stack: the tests marked
`both_stacks`. The rule (docs/testing.md, "Two stacks"): what differs between the stacks runs on both,
that is the Horovod backend (marked where it is launched), checkpoints crossing stacks, export, and the
TensorFlow/Keras-dependent code below, whose files are marked here as a whole; code that does not
depend on the stack (data, planner arithmetic, launch scripts, Spark) runs once, on the current stack.
"""
import pytest

# Keras 2 layers, optimizers, tapes and checkpoints: their numerics and APIs come from the stack's TensorFlow.
TENSORFLOW_DEPENDENT = ("tests/model/", "tests/embedding/", "tests/train/test_checkpoint.py",
                        "tests/train/test_named_checkpoints.py", "tests/train/test_optimizers.py",
                        "tests/train/test_row_subtraction.py",
                        "tests/train/test_widedeep_optimizers.py", "tests/export/")


def pytest_collection_modifyitems(items):
    for item in items:
        if item.nodeid.startswith(TENSORFLOW_DEPENDENT):
            item.add_marker(pytest.mark.both_stacks)
