"""What the tests read of a launch: each rank's lines whole, however its writes reach the launcher; and a
launch past its hang guard ends whole, ranks included."""
import os
import time

import pytest

from tests.support.multirank import finish, run_ranks, start_ranks
from tests.support.processes import alive, rank_lines, wait_until

# Each rank writes a line in three pieces (flushed apart, so the launcher sees three writes), then two lines
# and a third line's text in one write, then that line's newline alone, as `print` does unbuffered.
SPLIT_WRITES = """
import os, sys, time
rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("HOROVOD_RANK"))
for piece in (f"rank {rank} starts", " a line", " in pieces\\n", "two lines\\nin one write\\nthen", " a newline"):
    sys.stderr.write(piece)
    sys.stderr.flush()
    time.sleep(0.2)
sys.stderr.write("\\n")
"""


@pytest.mark.multirank
@pytest.mark.both_stacks
def test_a_rank_s_lines_written_in_pieces_are_read_whole():
    run = run_ranks(2, ["-c", SPLIT_WRITES], timeout=60).check()
    lines = rank_lines(run.stderr)
    for rank in (0, 1):
        assert [text for number, text in lines if number == rank] == [
            f"rank {rank} starts a line in pieces", "two lines", "in one write", "then a newline"], run.stderr


@pytest.mark.multirank
@pytest.mark.both_stacks
def test_a_launch_past_its_hang_guard_leaves_no_rank_behind(tmp_path):
    """mpirun puts each rank in a process group of its own: killing the launcher's group left them running."""
    started = time.monotonic()
    launcher = start_ranks(2, ["-c", "import os, time; open(os.path.join(os.environ['MULTIRANK_RESULT_DIR'], "
                                     "f'pid_{os.getpid()}'), 'w').close(); time.sleep(600)"], result_dir=str(tmp_path))
    try:
        assert wait_until(lambda: len(os.listdir(tmp_path)) == 2, timeout=120), "the ranks did not start"
        ranks = [int(name.split("_")[1]) for name in os.listdir(tmp_path)]
        run = finish(launcher, timeout=0, started=started, result_dir=str(tmp_path))  # its guard has passed
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert run.timed_out
    assert wait_until(lambda: not any(alive(pid) for pid in ranks), timeout=10), \
        [pid for pid in ranks if alive(pid)]
