"""Evaluation on a Ray cluster: ``imagent eval ... --ray local|auto|ADDRESS [--workers N]``.

N actors (default: one per GPU in the cluster, else ``--workers``) each open the workspace, the gallery and
the method once, exactly as a local run does (:func:`imagent.eval.worker.query_runner`), and answer queries
sent to them one at a time. The driver keeps the run directory: every finished query is appended to
``results.jsonl`` as it arrives, so a killed run resumes, and the report orders queries as the benchmark does.
All actors share the on-disk call cache, which computes each key once across processes, and append the keys of
the calls they make to the run folder's ``call_keys.txt`` (for ``imagent pack``). An actor that dies is
restarted and its query retried.

The actors need the index folder, the cache folder and the benchmark files at the same paths on every node (a
shared mount), as a multi-node ``imagent index --ray`` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from imagent.api import Workspace
from imagent.eval.datasets import EvalItem, load_benchmark
from imagent.eval.records import CALL_KEYS, CallRecorder, RunRecord


class _QueryActor:
    def __init__(self, workspace_cls: type[Workspace], settings_json: dict[str, Any], spec: Any, split: str,
                 index_dir: str, run_dir: str) -> None:
        from imagent.core.config import Settings
        from imagent.eval.worker import query_runner

        ws = workspace_cls(Settings.model_validate(settings_json))
        if ws.call_cache is not None:  # the actor's calls belong to the run's pack too (shared run folder)
            ws.call_cache.add_listener(CallRecorder(Path(run_dir) / CALL_KEYS))
        bench = load_benchmark(spec.benchmark, spec.annotations, spec.images_root, **spec.bench_options)
        prepared = ws.prepare_method(spec.method, index=Path(index_dir))  # once per actor, as a local run does
        self.one = query_runner(ws, prepared, spec.top_k, bench, split, Path(run_dir), lambda _msg: None)

    def run(self, item: EvalItem) -> RunRecord:
        return self.one(item)


def run_on_ray(ws: Workspace, spec: Any, split: str, index_dir: Path, run_dir: Path,
               pending: list[EvalItem]) -> Iterator[RunRecord]:
    """Yield each pending query's record as it finishes on the cluster (any order). Each actor builds a
    workspace of ``ws``'s class from its settings."""
    from imagent.index.distributed import ray_cluster

    with ray_cluster(spec.ray) as ray:
        gpus = int(ray.cluster_resources().get("GPU", 0))
        n = max(1, spec.workers if spec.workers > 1 else (gpus or 1))
        remote = ray.remote(_QueryActor).options(num_cpus=0, num_gpus=1 if gpus >= n else 0,
                                                 max_restarts=2, max_task_retries=2, scheduling_strategy="SPREAD")
        settings_json = ws.settings.model_dump(mode="json")
        actors = [remote.remote(type(ws), settings_json, spec, split, str(index_dir), str(run_dir))
                  for _ in range(n)]
        from ray.util import ActorPool

        pool = ActorPool(actors)
        yield from pool.map_unordered(lambda actor, item: actor.run.remote(item), pending)
        for actor in actors:
            ray.kill(actor)
