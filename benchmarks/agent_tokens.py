"""The token floor of the agentic methods: is an agent's time spent on its tokens, and how many does it evaluate?

For a few PhotoCraft and ImageSeeker queries of a DISBench-layout album (default: the shipped mini album) and a
few OSCAR queries of the stamps CIR split, run with an offline llama.cpp model (default: the configured offline
model; ``--model offline:qwen2.5-coder-1.5b-instruct`` for the larger one), this prints per query:

- ``calls``: model calls; ``sent``: prompt tokens sent (the sum of every call's prompt);
- ``evaluated``: prompt tokens llama.cpp actually evaluated, i.e. not reused from the KV prefix of the slot's
  previous prompt (:func:`imagent.models.chat_llamacpp.evaluated_prompt_tokens`, the same longest-prefix rule
  llama-cpp-python's ``generate`` applies); ``generated``: reply tokens; ``seconds``: the query's wall time;
- and for album queries the answer's F1 and EM.

The model's own prompt speed (a 560-token chunk) and generation speed (128 greedy tokens after it) are measured
in the same run, with the model loaded as the agents load it (threads, flash attention): at an empty context
before and after the queries (the mean is used: the machine is shared), and after the queries also at a depth
of context (the run's mean prompt length; twice, each beside an empty-context measurement, the faster pair kept:
one measurement can catch a passing load). A token costs more deep in a long prompt (attention reads every
earlier position; the cost grows about linearly with the position), so each call's tokens are priced where
they sit: its evaluated prompt tokens at their mean position (the end of its prompt), its generated tokens after
it, each at the empty-context time made dearer in proportion to its position, by as much as the depth measurement
is slower than the empty-context one taken just before it (a ratio of two measurements a minute apart holds when
the machine's load moved during the run; the absolute speed at depth alone did not). The last line is

    agent_tokens ratio=<seconds / (evaluated / prompt speed + generated / generation speed)>
                 evaluated_share=<evaluated / sent>

with each token's speed the one at its position (the empty-context ratio, every token priced as at a prompt's
start, is printed above it), and the share of the seconds spent inside model calls (the rest: tools, Python).

A ratio near 1 says the time goes into tokens, not into overhead (tools, grammar sampling, Python) or into
re-evaluating prompts. Calls are never served from imagent's call cache here (a fresh cache directory; the model
files are linked in from the usual cache).

``--save FILE`` keeps the per-query numbers as JSON; ``--before FILE`` (an earlier ``--save``) prints, per method,
evaluated prompt tokens per album episode before and after, with F1/EM beside them.

    python benchmarks/agent_tokens.py [--model NAME] [--queries q01,q12,q05] [--oscar 2] [--save out.json]

Measured 2026-11-26 with the 0.5B on the project's 2-core machine while six other jobs ran (load 11-23, so
seconds and the ratio are not trustworthy; token counts and calls are deterministic): mini album q01, PhotoCraft
before the described result lines (commit 3240b0b): 4 calls, 10,602 prompt tokens sent, 4,347 evaluated, 555
generated, F1 36.4, EM 0 (ratio 1.72 for that run, the machine's speed moving from 2.4 to 6.3 prompt tok/s during
it); after (commit 6a17839): 3 calls, 8,066 sent, 4,037 evaluated (-7%; -19% without the system prompt that
every query of a run shares: 2,522 -> 2,043), 245 generated (-56%), F1 33.3, EM 0; ImageSeeker after: 2 calls,
4,070 sent, 2,570 evaluated, 121 generated, F1 40.0. OSCAR, more queries and a quiet-machine ratio: not measured.

Measured 2026-11-26 evening (load ~1, 2 threads, ``--methods photocraft,imageseeker --oscar 0``), default queries:
before (commit 520be07, n_ctx 4096) PhotoCraft evaluated 4,037 / 2,248 / 8,117 / 2,183 prompt tokens (mean 4,146),
F1 33.3 / 35.3 / 0.0 / 28.6, q12 failing on the window; ImageSeeker 2,565 / 88 / 1,250 / 1,250, F1 40.0 / 44.4 /
0.0 / 0.0 (q06 failing on the window); last line ``agent_tokens ratio=1.478 evaluated_share=0.291`` (prompt speed
59 -> 44 tok/s during the run, tests running beside it for part). After (commit 65fae09: n_ctx 8192, grouped
results, derived audit, ``scope_first`` on) PhotoCraft 3,890 / 3,109 / 4,031 / 2,146 (mean 3,294, -21%) over
8 / 5 / 26 / 9 calls, F1 0.0 / 0.0 / 0.0 / 40.0; the ImageSeeker half and the ratio were not finished.

Measured 2026-11-26 late evening (load ~1): commit 709613a (``scope_first`` off) PhotoCraft 3,369 / 1,928 / 1,484 /
2,680 evaluated (mean 2,365, -43% against 520be07), F1 0.0 / 33.3 / 0.0 / 66.7; ImageSeeker 1,361 per episode, F1
40.0 / 40.0 / 0.0 / 0.0; last line ``agent_tokens ratio=1.750 evaluated_share=0.223``. A cProfile of two ImageSeeker
queries then showed 119 s of 465 s in llama-cpp-python's sampling (48 ms a token: its grammar checks all 151,936
tokens of the vocabulary) and the rest in decoding at 3-8k tokens of context, slower than the empty context the
speeds were measured in; since then grammars are checked lazily (:mod:`imagent.models.llama_sampling`, the same
tokens) and the last line prices tokens at the run's mean prompt length (the empty-context ratio is printed above
it). With the JSON-protocol guards (commit d9a83b2; ``scope_first``, ``anchor_filters``, the stuck guard) on the
default queries PhotoCraft F1 40.0 / 85.7 / 0.0 / 0.0, 3,563 evaluated per episode; over 14 of the 22 queries
(``--queries`` alternating intra- and inter-event, ``--budget 3300``, ``--threads 1``, ImageSeeker running beside
it) F1 15.4, ImageSeeker 9.5 on the 10 it reached (PhotoCraft 13.0 on those). The ratio of that run (1.833) is not
a measurement of overhead: three jobs shared two cores and its speeds were measured before the queries only.

Measured 2026-11-27 (commit d70c0c7 and this pricing; 1 thread beside a PhotoCraft run on the other core):
ImageSeeker q08, 8 calls, 25,621 prompt tokens sent, 4,855 evaluated, 444 generated, 178.0 s of which 177.9 s
inside model calls (cProfile of the same query: 370 s of 398 s in llama.cpp's ``decode``, speed measurements
included; sampling 1.5 s, tools under 1 s), F1 100. Speeds: prompt 57.6 tok/s and generation 11.7 at an empty
context, 34.2 and 9.5 after 3,202 tokens. Priced as at a prompt's start the ratio is 1.456; each token priced at
its position, ``agent_tokens ratio=1.062 evaluated_share=0.189``: the time is the tokens'. Flash attention
(``models.offline.flash_attn=true``) on the same query: 152.6 s instead of 169.6 s, but 7 calls and F1 0.0
instead of 8 calls and F1 100 (greedy replies change), so it stays off by default.

Measured 2026-11-27, the default command on the idle machine (load 0.5, 2 threads, commit 5c2dd5c, one depth
measurement): PhotoCraft q01 / q06 / q12 / q17 F1 75.0 / 44.4 / 85.7 / 0.0 (mean 51.3), 8 / 26 / 11 / 8 calls,
6,874 evaluated prompt tokens and 236 s an episode; ImageSeeker F1 0.0 on all four, 13 / 21 / 9 / 9 calls, 5,496
evaluated, 193 s; OSCAR 2 stamps queries, 24 and 28 calls, 39 s. 1,756.3 of 1,756.9 s inside model calls. Speeds
118.2 / 20.7 tok/s at an empty context; the one measurement after 2,878 tokens gave 37.5 / 16.0, so the last line
read ``agent_tokens ratio=0.745 evaluated_share=0.115`` (empty-context ratio 1.650). The same measurement repeated
two minutes later on the idle machine gave 74.3 / 13.6 beside 116.8 / 19.7 at an empty context (a one-Llama
check: 67 / 16.5 at 2,878 against 115 / 21.5): priced with it, the run's ratio is 1.004 (PhotoCraft 0.986,
ImageSeeker 1.027, OSCAR 1.033). Since then the depth is measured twice, each beside an empty-context
measurement, and the faster pair is kept; the default command then (commit 4aba446, idle, 2 threads): the same
calls, tokens and F1, 1,764.5 of 1,765.1 s inside model calls, 69.6 / 15.8 tok/s after 2,878 tokens beside 112.9 /
20.6, last line ``agent_tokens ratio=1.045 evaluated_share=0.115`` (empty-context ratio 1.608). Since commit c07edf2
(a query split without an anchor gets a one-link chain) q06's episodes are other ones: in the all-22 runs at that
commit (README) PhotoCraft and ImageSeeker each answered it in 4 calls with F1 30.8. The default command at commit
23e5544 (2026-11-27, idle, 2 threads, 853 s): PhotoCraft F1 75.0 / 30.8 / 85.7 / 0.0 in 8 / 4 / 11 / 8 calls
(4,922 / 1,606 / 4,541 / 5,072 evaluated, 39-116 s a query), ImageSeeker 0.0 / 30.8 / 0.0 / 0.0 in 13 / 3 / 9 / 9
calls (7,786 / 1,584 / 3,598 / 3,406 evaluated), OSCAR 5 and 6 calls; 852.5 of 852.9 s inside model calls; 67.1 /
15.9 tok/s after 3,225 tokens of context beside 119.1 / 21.4 at an empty one; last line ``agent_tokens ratio=0.914
evaluated_share=0.140`` (empty-context ratio 1.387).
"""

from __future__ import annotations  # noqa: I001 (imagent before numpy, below)

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import imagent  # first: imagent's thread settings must reach OpenBLAS before numpy loads it

from imagent.api import Workspace
from imagent.core.config import load_settings
from imagent.eval import metrics as M
from imagent.eval.runner import RunSpec, run_eval
from imagent.models import chat_llamacpp
from imagent.models.base import ChatResponse

ALBUM = Path(imagent.__file__).parent / "eval" / "data" / "album_mini"
# Two intra-event and two inter-event queries of the mini album (the first of each user's kind).
DEFAULT_QUERIES = ("q01", "q06", "q12", "q17")
ALBUM_METHODS = ("photocraft", "imageseeker")


class CallLog:
    """Every llama.cpp chat call of this process: prompt tokens sent and evaluated, reply tokens, seconds."""

    def __init__(self) -> None:
        self.calls: list[dict[str, float]] = []
        self.lock = threading.Lock()
        self._original = chat_llamacpp.LlamaCppChatModel.chat

    def install(self) -> None:
        original = self._original
        log = self

        def chat(model: Any, messages: Any, params: Any) -> ChatResponse:
            t0 = time.perf_counter()
            resp = original(model, messages, params)
            usage = resp.raw.get("usage") or {}
            with log.lock:
                log.calls.append({"sent": resp.prompt_tokens,
                                  "evaluated": int(usage.get("prompt_tokens_evaluated", resp.prompt_tokens)),
                                  "generated": resp.completion_tokens, "seconds": time.perf_counter() - t0})
            return resp

        chat_llamacpp.LlamaCppChatModel.chat = chat  # type: ignore[method-assign]

    def take(self) -> list[dict[str, float]]:
        with self.lock:
            out, self.calls = self.calls, []
        return out


SPEED_CHUNK = 560  # prompt tokens timed per speed measurement
SPEED_GEN = 128  # generated tokens timed per speed measurement


def measure_speed(model_path: Path, n_threads: int, context: int = 0,
                  flash_attn: bool = True) -> tuple[float, float]:
    """(prompt tokens/s, generated tokens/s) of the model on this machine now, in a context of its own: a
    :data:`SPEED_CHUNK`-token prompt evaluated after ``context`` tokens already in the context, then
    :data:`SPEED_GEN` greedy tokens after it."""
    from llama_cpp import Llama

    llama = Llama(model_path=str(model_path), n_ctx=max(2048, context + SPEED_CHUNK + SPEED_GEN + 64),
                  n_threads=n_threads, flash_attn=flash_attn, seed=0, verbose=False)
    try:
        words = ["photo", "album", "search", "agent", "date", "place", "score", "penguin", "lighthouse", "museum",
                 "harbour", "market", "birthday", "festival", "garden", "bridge"]
        tokens: list[int] = []
        n = 0
        while len(tokens) < context + SPEED_CHUNK:
            tokens += llama.tokenize((" " + " ".join(words[(i * 7) % len(words)] for i in range(n, n + 400))).encode(),
                                     add_bos=not tokens)
            n += 400
        llama.reset()
        if context:
            llama.eval(tokens[:context])
        t0 = time.perf_counter()
        llama.eval(tokens[context:context + SPEED_CHUNK])
        prompt_speed = SPEED_CHUNK / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        for _ in range(SPEED_GEN):
            llama.eval([llama.sample(temp=0.0)])
        gen_speed = SPEED_GEN / (time.perf_counter() - t0)
        return prompt_speed, gen_speed
    finally:
        llama.close()


class TokenPrices:
    """Seconds a token costs at a position of the context: linear in the position. ``at_zero``: the empty-context
    speeds the run is priced at; ``at_depth``: the speeds after ``depth`` tokens, measured right after ``base``
    (empty-context speeds): their ratio says how much dearer a token is that deep, a ratio two measurements a
    minute apart agree on even when the machine's load moved between the run and them (None: every position costs
    the same)."""

    def __init__(self, at_zero: tuple[float, float], at_depth: tuple[float, float] | None = None, depth: int = 0,
                 base: tuple[float, float] | None = None) -> None:
        self.p0, self.g0 = 1.0 / at_zero[0], 1.0 / at_zero[1]
        # Mean positions of the timed tokens: the prompt chunk's middle, the generated tokens' middle after it.
        self.x_p, self.x_g = SPEED_CHUNK / 2, SPEED_CHUNK + SPEED_GEN / 2
        if at_depth is None or depth <= 0:
            self.slope_p = self.slope_g = 0.0
        else:  # per token of depth, relative to the empty context; below 0 is noise (deeper is never cheaper)
            b = base or at_zero
            self.slope_p = self.p0 * max(0.0, b[0] / at_depth[0] - 1.0) / depth
            self.slope_g = self.g0 * max(0.0, b[1] / at_depth[1] - 1.0) / depth

    def call(self, sent: float, evaluated: float, generated: float) -> float:
        """Seconds of one call's tokens: ``evaluated`` prompt tokens ending at ``sent``, ``generated`` after."""
        prompt_at = max(0.0, sent - evaluated / 2)
        gen_at = sent + generated / 2
        return (evaluated * (self.p0 + self.slope_p * (prompt_at - self.x_p))
                + generated * (self.g0 + self.slope_g * (gen_at - self.x_g)))


def album_subset(album: Path, qids: list[str], work: Path) -> Path:
    """A DISBench folder with only ``qids`` of ``album``'s queries, in that order (the rest linked, not copied)."""
    out = work / "album"
    out.mkdir(parents=True)
    rows = [json.loads(x) for x in (album / "queries.jsonl").read_text().splitlines() if x.strip()]
    by_id = {r["query_id"]: r for r in rows}
    missing = [q for q in qids if q not in by_id]
    if missing:
        raise SystemExit(f"no such queries in {album}: {', '.join(missing)}")
    keep = [by_id[q] for q in dict.fromkeys(qids)] if qids else rows  # in the order given (a --budget cuts the end)
    (out / "queries.jsonl").write_text("".join(json.dumps(r) + "\n" for r in keep))
    for name in ("metadata", "images", "captions"):
        if (album / name).exists():
            (out / name).symlink_to((album / name).resolve(), target_is_directory=True)
    return out


class OutOfTime(Exception):
    """The --budget is spent: no further query starts."""


def run_method(ws: Workspace, log: CallLog, method: str, benchmark: str, root: Path | None, work: Path,
               split: str | None = None, limit: int | None = None,
               deadline: float = float("inf")) -> list[dict[str, Any]]:
    """Run ``method`` over the benchmark; one row per query with its calls' token counts. After ``deadline``
    (``time.monotonic()``) no further query starts; the rows of those that ran are returned."""
    rows: list[dict[str, Any]] = []
    log.take()

    def progress(phase: str, done: int, _total: int, label: str) -> None:
        if phase == "queries" and done and label:
            calls = log.take()
            rows.append({"method": method, "qid": label, "calls": len(calls),
                         **{k: int(sum(c[k] for c in calls)) for k in ("sent", "evaluated", "generated")},
                         "model_seconds": sum(c["seconds"] for c in calls),
                         "call_sent": [int(c["sent"]) for c in calls],
                         "call_evaluated": [int(c["evaluated"]) for c in calls],
                         "call_generated": [int(c["generated"]) for c in calls]})
        elif phase == "index":
            log.take()
        if time.monotonic() > deadline:
            raise OutOfTime

    run_dir = work / f"run-{method}"
    spec = RunSpec(benchmark=benchmark, method=method, split=split, images_root=root, limit=limit,
                   run_dir=run_dir, runs_root=work)
    try:
        run_eval(ws, spec, progress=progress)
    except OutOfTime:
        print(f"{method}: the --budget is spent; {len(rows)} query(ies) ran", flush=True)
    records = {}
    for line in (run_dir / "results.jsonl").read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            records[r["qid"]] = r
    truth = {}
    if benchmark == "disbench" and root is not None:
        for q in (root / "queries.jsonl").read_text().splitlines():
            if q.strip():
                e = json.loads(q)
                truth[e["query_id"]] = [f"{e['user_id']}/{a}" for a in e["answer"]]
    for row in rows:
        rec = records.get(row["qid"], {})
        row["seconds"] = float(rec.get("seconds") or row["model_seconds"])
        row["error"] = rec.get("error")
        if row["qid"] in truth:
            pred = rec.get("answer_set") or []
            row["f1"] = 100.0 * M.set_f1(pred, truth[row["qid"]])
            row["em"] = 100.0 * float(set(pred) == set(truth[row["qid"]]))
    return rows



def fresh_workspace(prefix: str, sets: list[str]) -> tuple[Path, Workspace, Any, Path, str, int]:
    """A workspace over a new temporary folder with an empty call cache (every call real) that shares the assembled
    GGUFs: ``(work dir, workspace, the default role's model entry, its GGUF path, model id, threads)``."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    cache = work / "cache"
    cache.mkdir()
    real_models = Path(load_settings(sets=sets).cache_dir).expanduser() / "models"  # the assembled GGUFs
    real_models.mkdir(parents=True, exist_ok=True)
    (cache / "models").symlink_to(real_models, target_is_directory=True)
    settings = load_settings(sets=[*sets, f"cache_dir={cache}", f"index={work / 'index'}"])
    name, cfg = settings.model_for_role("default")
    if cfg.backend != "llama.cpp":
        raise SystemExit(f"the default role's model {name!r} is not an in-process llama.cpp model")
    model_path, model_id = chat_llamacpp.resolve_model_path(cfg.model, cache)
    return work, Workspace(settings), cfg, model_path, model_id, cfg.n_threads or os.cpu_count() or 1

def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="offline model name or .gguf path (default: the configured "
                    "offline model)")
    ap.add_argument("--album", type=Path, default=ALBUM, help="DISBench-layout album (default: the mini album)")
    ap.add_argument("--queries", default=",".join(DEFAULT_QUERIES), help="album query ids, comma-separated")
    ap.add_argument("--methods", default="photocraft,imageseeker,oscar")
    ap.add_argument("--stamps", type=Path, default=None, help="stamps images root for OSCAR (default: "
                    "$IMAGENT_STAMPS, else the stamps imagent ships)")
    ap.add_argument("--oscar", type=int, default=2, help="OSCAR queries of the stamps CIR split")
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the config's)")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="config key=value (repeatable)")
    ap.add_argument("--save", type=Path, default=None, help="write the per-query numbers as JSON")
    ap.add_argument("--before", type=Path, default=None, help="an earlier --save to compare with")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (run folders with each query's "
                    "trace, the album subset) and print where it is")
    ap.add_argument("--budget", type=float, default=None, help="seconds after which no further query starts "
                    "(the summary then covers the queries that ran)")
    args = ap.parse_args(argv)
    deadline = time.monotonic() + args.budget if args.budget else float("inf")

    sets = list(args.sets)
    if args.model:
        sets.append(f"models.offline.model={args.model}")
    if args.threads:
        sets.append(f"models.offline.n_threads={args.threads}")
    if "oscar" in args.methods:
        from imagent.methods.oscar.config import OscarConfig

        if not OscarConfig().library_path().is_file():  # no golden library built: plan without demonstrations
            print("OSCAR: no golden library (imagent oscar build-library); planning without demonstrations")
            sets.append("methods.oscar.demonstrations=false")
    work, ws, cfg, model_path, model_id, threads = fresh_workspace("agent-tokens-", sets)
    fa = cfg.flash_attn
    print(f"model {model_id} ({model_path.stat().st_size / 1e6:,.0f} MB), {threads} threads, flash attention "
          f"{'on' if fa else 'off'}; load average {os.getloadavg()[0]:.2f}", flush=True)
    p1, g1 = measure_speed(model_path, threads, flash_attn=fa)
    print(f"speed before: prompt {p1:.1f} tok/s, generation {g1:.1f} tok/s", flush=True)

    log = CallLog()
    log.install()
    rows: list[dict[str, Any]] = []
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    qids = [q.strip() for q in args.queries.split(",") if q.strip()]
    album = album_subset(args.album, qids, work) if any(m in ALBUM_METHODS for m in methods) else None
    for method in methods:
        if time.monotonic() > deadline:
            print(f"{method}: not run, the --budget is spent", flush=True)
            continue
        try:
            if method in ALBUM_METHODS:
                assert album is not None
                rows += run_method(ws, log, method, "disbench", album, work, deadline=deadline)
            elif method == "oscar":
                env = os.environ.get("IMAGENT_STAMPS")
                stamps = args.stamps or (Path(env) if env else None)  # None: the stamps imagent ships
                rows += run_method(ws, log, "oscar", "stamps", stamps, work, split="cir", limit=args.oscar,
                                   deadline=deadline)
            else:
                raise SystemExit(f"unknown method {method!r} (photocraft, imageseeker, oscar)")
        except Exception as exc:  # one method failing must not lose the others' numbers
            print(f"{method}: failed ({type(exc).__name__}: {exc})", flush=True)
            continue
        for r in rows:
            if r["method"] == method:
                print(f"{r['method']:<12} {r['qid']:<10} calls {r['calls']:>3}  sent {r['sent']:>7}  "
                      f"evaluated {r['evaluated']:>6}  generated {r['generated']:>5}  {r['seconds']:7.1f} s"
                      + (f"  F1 {r['f1']:5.1f} EM {r['em']:3.0f}" if "f1" in r else "")
                      + (f"  error: {r['error']}" if r.get("error") else ""), flush=True)
    sizes = [n for r in rows for n in r.get("call_sent", [])]
    context = int(sum(sizes) / len(sizes)) if sizes else 0
    # Measured even when the --budget is spent (a minute at most): the queries ran on the machine as it was then,
    # and the speed before alone overstates what a loaded machine gave them.
    p2, g2 = measure_speed(model_path, threads, flash_attn=fa)
    prompt_speed, gen_speed = (p1 + p2) / 2, (g1 + g2) / 2
    print(f"speed after: prompt {p2:.1f} tok/s, generation {g2:.1f} tok/s; mean: {prompt_speed:.1f} and "
          f"{gen_speed:.1f}", flush=True)
    at_context, base = None, (p2, g2)
    if context:  # the best of two, each beside its own empty-context measurement: one can catch a passing load
        pairs = [(measure_speed(model_path, threads, flash_attn=fa), measure_speed(model_path, threads, context,
                                                                                   flash_attn=fa)) for _ in range(2)]
        base, at_context = max(pairs, key=lambda pair: pair[1][0])
        print(f"speed after {context} tokens of context (the run's mean prompt): prompt {at_context[0]:.1f} "
              f"tok/s, generation {at_context[1]:.1f} tok/s (at an empty context just before: {base[0]:.1f} and "
              f"{base[1]:.1f}; the faster of two such pairs)", flush=True)

    if args.save:
        args.save.write_text(json.dumps({"model": model_id, "prompt_speed": prompt_speed,
                                         "generation_speed": gen_speed, "speed_after": [p2, g2],
                                         "speed_base": list(base),
                                         "speed_at_context": [context, *(at_context or ())], "rows": rows}, indent=1))
    if args.before and not args.before.is_file():
        print(f"no before/after comparison: {args.before} does not exist (yet)")
    elif args.before:
        before = json.loads(args.before.read_text())
        print(f"before ({args.before}, model {before['model']}) -> now ({model_id}), per album episode:")
        for method in ALBUM_METHODS:
            old = [r for r in before["rows"] if r["method"] == method and r["qid"] in qids]
            new = [r for r in rows if r["method"] == method]
            if not old or not new:
                continue

            def avg(rs: list[dict[str, Any]], k: str) -> float:
                return sum(float(r.get(k, 0.0)) for r in rs) / len(rs)

            change = 100.0 * (avg(new, "evaluated") / max(1.0, avg(old, "evaluated")) - 1.0)
            print(f"  {method:<12} evaluated {avg(old, 'evaluated'):8.0f} -> {avg(new, 'evaluated'):8.0f} "
                  f"({change:+.0f}%)  sent {avg(old, 'sent'):8.0f} -> {avg(new, 'sent'):8.0f}  "
                  f"calls {avg(old, 'calls'):5.1f} -> {avg(new, 'calls'):5.1f}  "
                  f"F1 {avg(old, 'f1'):5.1f} -> {avg(new, 'f1'):5.1f}  EM {avg(old, 'em'):5.1f} -> "
                  f"{avg(new, 'em'):5.1f}  s {avg(old, 'seconds'):6.1f} -> {avg(new, 'seconds'):6.1f}")
    seconds = sum(r["seconds"] for r in rows)
    model_seconds = sum(r["model_seconds"] for r in rows)
    evaluated = sum(r["evaluated"] for r in rows)
    sent = sum(r["sent"] for r in rows)
    flat = TokenPrices((prompt_speed, gen_speed))
    priced = TokenPrices((prompt_speed, gen_speed), at_context, context, base=base)
    calls = [(s_, e, g) for r in rows
             for s_, e, g in zip(r.get("call_sent", []), r.get("call_evaluated", []),
                                     r.get("call_generated", []), strict=True)]
    floor_flat = sum(flat.call(*c) for c in calls)  # every row keeps its calls' numbers: no other way to price
    floor = sum(priced.call(*c) for c in calls)
    if args.keep:
        print(f"work folder kept: {work} (run-<method>/results.jsonl holds each query's trace)")
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(f"seconds inside model calls: {model_seconds:.1f} of {seconds:.1f} "
          f"({100.0 * model_seconds / max(seconds, 1e-9):.1f}%; the rest: tools, Python)")
    print(f"ratio at an empty context's speed: {seconds / max(floor_flat, 1e-9):.3f} (tokens priced as at a prompt's "
          "start)")
    print(f"agent_tokens ratio={seconds / max(floor, 1e-9):.3f} evaluated_share={evaluated / max(sent, 1):.3f}")

if __name__ == "__main__":
    sys.exit(main())
