"""What the tests read of a launch: each rank's lines whole, however its writes reach the launcher."""
import pytest

from tests.support.multirank import run_ranks
from tests.support.processes import rank_lines

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
