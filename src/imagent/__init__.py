"""imagent: training-free, agentic image retrieval."""

import os as _os

# One thread policy for torch and numpy (issue 16). torch's OpenMP threads (libgomp) busy-wait after each
# parallel region; a gallery scan right after a query encode then runs its BLAS threads against them on the
# same cores. Measured on 2 cores (benchmarks/album_tools.py, 100,000 photos): ImageSearch p95 88 ms spinning,
# 16 ms with passive waiting, for +2.6 ms on the encode's median. Read by libgomp when torch first loads it, so
# set here, before imagent imports torch; a user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT is kept.
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Ranking, Result

__all__ = ["ImageRecord", "Query", "Ranking", "Result", "Trace"]
__version__ = "0.1.0"
