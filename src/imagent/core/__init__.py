"""The lowest layer: what every other part shares and nothing in the package below it.

Types (:mod:`~imagent.core.types`: ``ImageRecord``, ``Query``, ``Ranking``, ``Result``), the trace
(:mod:`~imagent.core.trace`), settings (:mod:`~imagent.core.config`), content hashing, the on-disk call cache
(:mod:`~imagent.core.cache`) and the one registry type (:mod:`~imagent.core.registry`). Import the module you
need (``from imagent.core.types import Query``); this package itself exports nothing.
"""
