"""numba's thread pool for the parallel decode and check: started once, on a thread-safe layer."""
from __future__ import annotations

import os
import threading

import numba
import numpy as np

from dlrm.errors import EnvironmentProblem

_threading_layer_checked = False
_threading_layer_lock = threading.Lock()  # prefetch workers reach the first parallel decode together


@numba.njit(parallel=True, cache=True)
def _probe_threads(out):
    for i in numba.prange(out.shape[0]):
        out[i] = i


def check_threading_layer() -> None:
    """Start numba's thread pool once, on a thread-safe layer; a clear error if none loads.

    Several decode threads run in numba's thread pool. Its fallback "workqueue" layer aborts the
    process when two threads launch kernels at once (e.g. a training and an evaluation reader
    prefetching), so unless the user chose a layer (NUMBA_THREADING_LAYER), ask for TBB or OpenMP.
    """
    global _threading_layer_checked
    if _threading_layer_checked:
        return
    with _threading_layer_lock:
        if not _threading_layer_checked:
            _start_thread_pool()
            _threading_layer_checked = True


def _start_thread_pool() -> None:
    if "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = "threadsafe"  # read when the pool starts, i.e. just below
    try:
        _probe_threads(np.empty(2, np.int64))
    except ValueError as error:  # numba: "No threading layer could be loaded"
        raise EnvironmentProblem("decoding a batch on several threads needs numba's OpenMP or TBB threading "
                                 "layer (Debian: apt-get install libgomp1); use one decode thread otherwise") from error
    if numba.threading_layer() == "workqueue":
        raise EnvironmentProblem("numba's workqueue threading layer is not thread-safe "
                                 "(NUMBA_THREADING_LAYER=workqueue): use omp or tbb, or one decode thread")


def use_threads(threads: int) -> None:
    """Run this thread's next parallel launches on up to `threads` of numba's threads."""
    check_threading_layer()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
