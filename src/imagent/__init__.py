"""imagent: training-free, agentic image retrieval."""

from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, Query, Ranking, Result

__all__ = ["ImageRecord", "Query", "Ranking", "Result", "Trace"]
__version__ = "0.1.0"
