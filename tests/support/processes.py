"""The processes of a multi-rank launch, seen from the test: ranks by pid, their output lines, waiting."""
import os
import re
import signal
import time


def descendants(pid: int) -> list:
    """Every process below `pid` (children, their children, ...), read from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid` and every process below it, the whole tree seen before the first kill (a child that
    made a session of its own is still found, and none is orphaned before it is seen)."""
    for victim in [*descendants(pid), pid]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass


def rank_pids(launcher_pid: int) -> dict:
    """{rank: pid} of the `main.py` processes started by the launcher (HOROVOD_RANK or OMPI_COMM_WORLD_RANK)."""
    pids = {}
    for pid in descendants(launcher_pid):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:
            continue
        rank = environ.get(b"HOROVOD_RANK", environ.get(b"OMPI_COMM_WORLD_RANK"))
        if cmdline and cmdline[0].endswith(b"python") and any(a.endswith(b"main.py") for a in cmdline) \
                and rank is not None:
            pids[int(rank)] = pid
    return pids


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(condition, timeout: float, poll: float = 0.2) -> bool:
    """Poll `condition()` until it holds (True) or `timeout` seconds pass (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(poll)
    return False


RANK_LINE = re.compile(r"^\[(?:\d+,)?(\d+)\]<std(?:err|out)>:(.*)$")  # horovodrun: [0]; mpirun --tag-output: [1,0]
# The launcher's report of the first rank that ended the job: horovodrun's, mpirun's for an exit status, and
# mpirun's for a signal (reported by horovodrun as 128 + the signal).
FIRST_EXIT = (re.compile(r"Process (\d+) exit with status code (\d+)"),
              re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s*\n\s*Exit code:\s+(\d+)"),
              re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)"))


def first_exit(output: str) -> tuple:
    """(rank, exit status) of the first rank whose exit ended the job, as horovodrun or mpirun reports it."""
    for number, pattern in enumerate(FIRST_EXIT):
        found = pattern.search(output)
        if found:
            rank, status = int(found.group(1)), int(found.group(2))
            return rank, status + 128 if number == 2 else status
    raise AssertionError(f"no launcher report of an exiting rank in:\n{output[-3000:]}")


MPIRUN_TAG = re.compile(r"(\[\d+,\d+\]<std(?:out|err|diag)>:)")


def whole_tagged_lines(output: str) -> str:
    """`mpirun --tag-output`'s output with every rank's line whole and tagged once.

    mpirun tags each write a rank makes, not each line: a line written in two writes (`print` writes its
    text, then the newline) can come out as "[1,0]<stderr>:text[1,1]<stderr>:...\n[1,0]<stderr>:\n". The
    launcher's own (untagged) lines are kept where they come; a rank's line where its newline comes."""
    pieces = MPIRUN_TAG.split(output)
    whole = [pieces[0]]
    partial: dict = {}
    for tag, text in zip(pieces[1::2], pieces[2::2]):
        head, newline, launcher_text = text.partition("\n")
        partial[tag] = partial.get(tag, "") + head
        if newline:
            whole.append(f"{tag}{partial.pop(tag)}\n")
        whole.append(launcher_text)
    whole.extend(f"{tag}{text}\n" for tag, text in partial.items())
    return "".join(whole)


def rank_lines(output: str) -> list:
    """(rank, text) of every line a rank printed under horovodrun or `mpirun --tag-output` (the launcher's own
    lines excluded: horovodrun itself ends with a traceback of its own whenever a rank exits non-zero)."""
    return [(int(m.group(1)), m.group(2)) for m in map(RANK_LINE.match, output.splitlines()) if m]


# TensorFlow >= 2.16 logs through absl before absl is initialised, which writes to stderr whatever
# TF_CPP_MIN_LOG_LEVEL says: the notice about it, then lines such as "I0000 00:00:... port.cc:153] oneDNN ...".
ABSL_PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
ABSL_LINE = re.compile(r"^[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] ")


def own_lines(stderr: str) -> list:
    """The non-blank lines of a process's stderr without TensorFlow's native start-up log."""
    return [line for line in stderr.splitlines()
            if line.strip() and line != ABSL_PREAMBLE and not ABSL_LINE.match(line)]
