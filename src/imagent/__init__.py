"""imagent: training-free, agentic image retrieval."""

import os as _os

# One thread policy for torch and numpy (issue 16). torch's OpenMP threads (libgomp) busy-wait after each
# parallel region; a gallery scan right after a query encode then runs its BLAS threads against them on the
# same cores. Measured on 2 cores (benchmarks/album_tools.py, 100,000 photos): ImageSearch p95 88 ms spinning,
# 16 ms with passive waiting, for +2.6 ms on the encode's median. Read by libgomp when torch first loads it, so
# set here, before imagent imports torch; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
# The same the other way round: numpy's OpenBLAS threads spin for ~0.1 s after each threaded product (2^28
# cycles), so a torch scan right after one shared its cores with them. Measured on 2 cores, 100,000 x 384:
# torch's 2-query scan 2.8 ms, 6-13 ms within 0.1 s of a threaded numpy product, 3.1 ms with the timeout at 2^4
# cycles (benchmarks/overhead.py: X^R's overhead 8.7 -> 6.5 ms after the reference scan before it). imagent's
# own one-query scans no longer use OpenBLAS's threads (index/scoring.py, _one_query); this covers the threaded
# products left (many queries at once, a program's own). OpenBLAS reads it when numpy is first imported.
if "OPENBLAS_THREAD_TIMEOUT" not in _os.environ:
    _os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"

from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Ranking, Result

__all__ = ["ImageRecord", "Query", "Ranking", "Result", "Trace"]
__version__ = "0.1.0"
