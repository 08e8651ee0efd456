"""How every command-line entry point reports errors: one message, once, and an exit status.

`run_main(main, argv)` runs an entry point's `main(argv)` and turns what it raises into an exit status:

- a `UserError` (bad flag, data, spec, plan, checkpoint, NaN loss, signal) prints one line
  `error: <message>` on stderr, no traceback (unless `--debug`), and exits with the error's
  `exit_code` (1 unless it says otherwise: a usage error 2, a signal 128 + its number);
- an error that every rank raises identically (`on_every_rank`) is printed by rank 0 only; one that
  a single rank saw is printed by that rank as `error: rank k: <message>`; `PeerRankFailed` (this
  rank stopped because another one failed) prints nothing, the failed rank says why. A launcher such
  as horovodrun or mpirun ends every rank as soon as one exits with an error, so the rank that
  reports must exit first: a rank that prints nothing waits a few seconds (`dist.leave_after_error`);
- Horovod's report of a dead or stalled peer rank prints one line naming this rank;
- Ctrl-C outside the training loop (which handles it itself) exits 130 with one line from rank 0;
- anything else is a bug and keeps its traceback.

The rank comes from the launcher's environment, so this works before and without Horovod's init.
"""
from __future__ import annotations

import signal
import sys
import traceback
from typing import Callable, Optional, Sequence

from dlrm import dist
from dlrm.errors import PeerRankFailed, UsageError, UserError

DEBUG_FLAG = "--debug"
# How long a rank whose error another rank reports waits before exiting, so that the reporting rank's
# message is printed before the launcher ends the job (that rank exits first and this is cut short).
PEER_EXIT_GRACE_SECONDS = 10.0


def _print(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def user_error_text(error: UserError, rank: int, world_size: int) -> Optional[str]:
    """What this rank prints for `error` (None: nothing, another rank reports it)."""
    if isinstance(error, PeerRankFailed):
        return None
    if error.on_every_rank:
        if rank != 0:
            return None
        return str(error) if isinstance(error, UsageError) else f"error: {error}"
    where = f"rank {rank}: " if world_size > 1 else ""
    return f"error: {where}{error}"


def peer_failure_text(rank: int) -> str:
    return (f"error: rank {rank}: stopped because another rank failed or stalled (Horovod shut down); "
            f"the first error above says why")


def run_main(main: Callable[[list], Optional[int]], argv: Optional[Sequence[str]] = None) -> int:
    """`main(argv)`'s exit status, with errors reported as the module docstring says."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = DEBUG_FLAG in argv
    world = dist.launcher_world()
    try:
        return main(argv) or 0
    except UserError as error:
        if debug:
            traceback.print_exc()
        text = user_error_text(error, world.rank, world.size)
        if text:
            _print(text)
        dist.leave_after_error(reported=text is not None, grace_seconds=PEER_EXIT_GRACE_SECONDS)
        return error.exit_code
    except KeyboardInterrupt:
        if debug:
            traceback.print_exc()
        if world.rank == 0:  # the terminal sends Ctrl-C to every rank
            _print("interrupted (Ctrl-C)")
        return 128 + signal.SIGINT
    except Exception as error:
        if not dist.is_peer_failure(error):
            raise
        if debug:
            traceback.print_exc()
        _print(peer_failure_text(world.rank))
        return 1
