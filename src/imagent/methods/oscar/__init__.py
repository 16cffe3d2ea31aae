"""OSCAR (shared/papers/oscar.txt): atomic retrievals, the exact two-stage MIP (:mod:`imagent.tools.oscar_mip`), a
golden library of optimal trajectories, and a planner with set operations and a logit verifier.

Modules: :mod:`.config` (hyper-parameters), :mod:`.atomic` (retrieval tools, rewriter, atomic retrievals),
:mod:`.library` (golden library store and build), :mod:`.protocols` (the planner on the agents runtime's
protocols: native tools, ``<tool_call>`` text, the JSON plan grammar), :mod:`.planner` (prompt, plan reading
and execution),
:mod:`.method` (the ``oscar`` method). Importing the package registers the method.
"""

from imagent.methods.oscar.config import OscarConfig, RetrieverSpec
from imagent.methods.oscar.library import GoldenLibrary, LibraryEntry, build_library
from imagent.methods.oscar.method import Oscar

__all__ = ["GoldenLibrary", "LibraryEntry", "Oscar", "OscarConfig", "RetrieverSpec", "build_library"]
