"""What CI's second lane (the Horovod stack: TensorFlow 2.15 + Horovod, `make STACK=horovod
test-horovod-lane`) runs besides the first lane's whole suite on the current stack: the tests marked
`both_stacks`. The rule (docs/testing.md, "Two stacks"): what differs between the stacks runs on both,
that is the Horovod backend (marked where it is launched), checkpoints crossing stacks, export, and the
TensorFlow/Keras-dependent code below, whose files are marked here as a whole; code that does not
depend on the stack (data, planner arithmetic, launch scripts, Spark) runs once, on the current stack.

`make test` runs the suite on two pytest-xdist workers. The tests that start several processes or daemons
(markers `multirank`, `slurm`) form one group, run one at a time on one worker, because they use fixed
ports or bound how fast a job ends; beside them the other worker runs the rest, a test module per unit, so
that a module's fixtures (a Spark session) are built once. The groups are handed out longest first
(`--no-loadscope-reorder` keeps this order): the one-at-a-time group, then the modules with `slow` tests outside it,
then the rest, so that no long module is left for the end.
"""
import pytest

# Keras 2 layers, optimizers, tapes and checkpoints: their numerics and APIs come from the stack's TensorFlow.
TENSORFLOW_DEPENDENT = ("tests/model/", "tests/embedding/", "tests/train/test_checkpoint.py",
                        "tests/train/test_named_checkpoints.py", "tests/train/test_optimizers.py",
                        "tests/train/test_row_subtraction.py",
                        "tests/train/test_widedeep_optimizers.py", "tests/export/")


ONE_AT_A_TIME = ("multirank", "slurm")


def xdist_group(item: pytest.Item) -> str:
    """The worker group of a test: one for every test that must run alone, else its module."""
    if any(item.get_closest_marker(marker) for marker in ONE_AT_A_TIME):
        return "one_at_a_time"
    return _module(item)


def _module(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def longest_first(items: list) -> list:
    """`items` with the one-at-a-time group first, then the modules that hold a `slow` test outside it, then the rest,
    each in collection order (pytest-xdist hands the groups out in the order their first test comes)."""
    slow_modules = {_module(item) for item in items
                    if item.get_closest_marker("slow") and xdist_group(item) != "one_at_a_time"}
    return sorted(items, key=lambda item: 0 if xdist_group(item) == "one_at_a_time" else
                  1 if _module(item) in slow_modules else 2)


def pytest_collection_finish(session):
    """Refuse to run ungrouped under --dist loadgroup: pytest-xdist marks a test's group in its node id
    (pytest 9 ignores that), and the multi-process tests would then run two at a time."""
    if getattr(session.config.option, "loadgroup", False):  # set on xdist's workers
        ungrouped = [item.nodeid for item in session.items if "@" not in item.nodeid]
        if ungrouped:
            raise pytest.UsageError(f"--dist loadgroup did not group {ungrouped[0]} (pytest {pytest.__version__}; "
                                    f"requirements.txt pins the pytest that keeps pytest-xdist's groups)")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups into the node ids
def pytest_collection_modifyitems(config, items):
    grouped = config.pluginmanager.hasplugin("xdist")
    if grouped:
        items[:] = longest_first(items)
    for item in items:
        if item.nodeid.startswith(TENSORFLOW_DEPENDENT):
            item.add_marker(pytest.mark.both_stacks)
        if grouped:
            item.add_marker(pytest.mark.xdist_group(xdist_group(item)))
