"""A comparison of eval runs (:func:`imagent.eval.compare.compare_runs`) as one self-contained HTML page:
the runs by id, the metrics side by side with their differences, the bootstrap intervals of each difference and
the paired tests, the runs' metric curves overlaid (recall@k, or set precision / recall / F1 for a set-valued
benchmark) as inline SVG, and the per-query deltas. No script, no external file: it opens anywhere.

>>> Path("cmp.html").write_text(compare_html(compare_runs([run_a, run_b])))
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.6em 0 1.4em}th,td{border:1px solid #ccc;padding:3px 8px}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{background:#f3f3f3}
.pos{color:#1a7f37}.neg{color:#c62828}.key span{display:inline-block;margin-right:1.2em}
.sw{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:-1px}
svg text{font:11px system-ui,sans-serif}
"""


def _num(v: Any, fmt: str = "{:.2f}") -> str:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "" if v is None else escape(str(v))
    if isinstance(v, float) and math.isnan(v):
        return "nan"
    return fmt.format(v) if isinstance(v, float) else str(v)


def _signed(v: float) -> str:
    cls = "pos" if v > 0 else "neg" if v < 0 else ""
    return f'<td class="n {cls}">{v:+.2f}</td>'


def _line_chart(series: dict[str, dict[str, float]], title: str, xlabel: str, ylabel: str) -> str:
    """Overlaid polylines (one per run) on a log-k axis: ``series[label] = {k: value}``."""
    pts = {lab: sorted((int(k), float(v)) for k, v in s.items()) for lab, s in series.items() if s}
    if not pts:
        return ""
    ks = sorted({k for p in pts.values() for k, _ in p})
    w, h, left, right, top, bottom = 640, 300, 50, 20, 28, 40
    lo, hi = math.log(max(ks[0], 1)), math.log(max(ks[-1], 2))
    span = hi - lo or 1.0

    def x(k: int) -> float:
        return left + (math.log(max(k, 1)) - lo) / span * (w - left - right)

    def y(v: float) -> float:
        return top + (1 - v / 100.0) * (h - top - bottom)

    out = [f'<svg class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
           f'aria-label="{escape(title)}">', f'<text x="{left}" y="16">{escape(title)}</text>']
    for v in (0, 25, 50, 75, 100):
        out.append(f'<line x1="{left}" x2="{w - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for k in ks:
        out.append(f'<text x="{x(k):.1f}" y="{h - bottom + 16}" text-anchor="middle">{k}</text>')
    out.append(f'<text x="{(w + left) / 2:.0f}" y="{h - 6}" text-anchor="middle">{escape(xlabel)}</text>'
               f'<text x="12" y="{(h + top) / 2:.0f}" transform="rotate(-90 12 {(h + top) / 2:.0f})" '
               f'text-anchor="middle">{escape(ylabel)}</text>')
    for i, (lab, p) in enumerate(pts.items()):
        color = COLORS[i % len(COLORS)]
        poly = " ".join(f"{x(k):.1f},{y(v):.1f}" for k, v in p)
        out.append(f'<polyline class="curve" data-run="{escape(lab)}" points="{poly}" fill="none" '
                   f'stroke="{color}" stroke-width="2"/>')
        out += [f'<circle cx="{x(k):.1f}" cy="{y(v):.1f}" r="3" fill="{color}"><title>{escape(lab)} k={k}: '
                f'{v:.1f}</title></circle>' for k, v in p]
    out.append("</svg>")
    return "\n".join(out)


def _bar_chart(series: dict[str, dict[str, dict[str, float]]], title: str) -> str:
    """Grouped bars of set precision / recall / F1 per query group, one colour per run."""
    groups = [g for g in next(iter(series.values()), {})]
    if not groups:
        return ""
    keys = ("precision", "recall", "f1")
    labels = list(series)
    w, h, left, top, bottom = 640, 300, 50, 28, 50
    slot = (w - left - 20) / (len(groups) * len(keys))
    bw = slot / (len(labels) + 1)
    out = [f'<svg class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
           f'aria-label="{escape(title)}">', f'<text x="{left}" y="16">{escape(title)}</text>']

    def y(v: float) -> float:
        return top + (1 - v / 100.0) * (h - top - bottom)

    for v in (0, 50, 100):
        out.append(f'<line x1="{left}" x2="{w - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v}</text>')
    for gi, g in enumerate(groups):
        for ki, key in enumerate(keys):
            x0 = left + (gi * len(keys) + ki) * slot
            out.append(f'<text x="{x0 + slot / 2:.1f}" y="{h - bottom + 14}" text-anchor="middle">{key}</text>')
            for li, lab in enumerate(labels):
                v = float((series[lab].get(g) or {}).get(key, 0.0))
                out.append(f'<rect class="bar" data-run="{escape(lab)}" x="{x0 + li * bw + bw / 2:.1f}" '
                           f'y="{y(v):.1f}" width="{bw:.1f}" height="{y(0) - y(v):.1f}" '
                           f'fill="{COLORS[li % len(COLORS)]}"><title>{escape(lab)} {escape(g)} {key}: '
                           f'{v:.1f}</title></rect>')
        n = (series[labels[0]].get(g) or {}).get("queries", "")
        out.append(f'<text x="{left + (gi * len(keys) + 1.5) * slot:.1f}" y="{h - bottom + 32}" '
                   f'text-anchor="middle">{escape(g)} (n={n})</text>')
    out.append("</svg>")
    return "\n".join(out)


def compare_html(result: dict[str, Any]) -> str:
    labels = list(result["runs"])
    two = len(labels) == 2
    title = "Comparison: " + " vs ".join(labels)
    h = [f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{escape(title)}</title>"
         f"<style>{_CSS}</style></head><body>", f"<h1>{escape(title)}</h1>", '<ul id="runs">']
    for i, (lab, info) in enumerate(result["runs"].items()):
        h.append(f'<li><span class="sw" style="background:{COLORS[i % len(COLORS)]}"></span><b>{escape(lab)}</b>: '
                 f'run <code>{escape(str(info.get("run_id")))}</code> in <code>{escape(info["run_dir"])}</code> '
                 f'({escape(str(info["benchmark"]))} {escape(str(info["split"]))}, {info["queries"]} queries)</li>')
    h.append("</ul>")
    if result.get("warnings"):
        h.append("<h2>Warnings</h2><ul>" + "".join(f"<li>{escape(w)}</li>" for w in result["warnings"]) + "</ul>")
    # curves
    curves = result.get("curves") or {}
    recall = {lab: c["recall"] for lab, c in curves.items() if c.get("recall")}
    sets = {lab: c["sets"] for lab, c in curves.items() if c.get("sets")}
    if recall or sets:
        h.append("<h2>Curves</h2>")
        if recall:
            h.append(_line_chart(recall, "recall@k (%), final ranking", "k", "recall@k (%)"))
        if sets:
            h.append(_bar_chart(sets, "set precision / recall / F1 (%) of the answered sets"))
    # metrics table
    h.append('<h2>Metrics</h2><table id="metrics"><tr><th>metric</th>'
             + "".join(f"<th>{escape(lab)}</th>" for lab in labels) + ("<th>delta</th>" if two else "") + "</tr>")
    for row in result["rows"]:
        cells = "".join(f'<td class="n">{_num(row.get(lab))}</td>' for lab in labels)
        delta = _signed(row["delta"]) if two and isinstance(row.get("delta"), (int, float)) else \
            ("<td></td>" if two else "")
        h.append(f"<tr><td>{escape(row['metric'])}</td>{cells}{delta}</tr>")
    h.append("</table>")
    boot = result.get("bootstrap") or []
    if boot:
        a, b = labels
        h.append(f"<h2>Differences {escape(b)} &minus; {escape(a)}, 95% paired bootstrap intervals</h2>"
                 '<table id="bootstrap"><tr><th>metric</th><th>queries</th>'
                 f"<th>{escape(a)}</th><th>{escape(b)}</th><th>difference</th><th>95% CI</th></tr>")
        for r in boot:
            mark = " (excludes 0)" if r["excludes_zero"] else ""
            h.append(f"<tr><td>{escape(r['metric'])}</td><td class=n>{r['queries']}</td>"
                     f"<td class=n>{r['mean_a']:.2f}</td><td class=n>{r['mean_b']:.2f}</td>{_signed(r['difference'])}"
                     f"<td>[{r['ci_low']:+.2f}, {r['ci_high']:+.2f}]{mark}</td></tr>")
        h.append("</table>")
    pq = result.get("per_query")
    if pq:
        a, b = pq["labels"]
        h.append(f"<h2>Per query</h2><p>Score: {escape(pq['score'])}, on the {pq['queries']} queries both runs "
                 f"answered. {escape(b)} wins {pq['wins']}, loses {pq['losses']}, ties {pq['ties']} against "
                 f"{escape(a)}; mean {pq['mean_a']:.3f} &rarr; {pq['mean_b']:.3f}. Paired tests of no difference: "
                 f"sign test p = {pq['sign_test_p']:.3g}, permutation test p = {pq['permutation_p']:.3g}.</p>")
        h.append(f'<table id="deltas"><tr><th>query</th><th>{escape(a)}</th><th>{escape(b)}</th>'
                 "<th>delta</th></tr>")
        for r in pq.get("deltas", []):
            h.append(f"<tr><td>{escape(str(r['query']))}</td><td class=n>{r['a']:.3f}</td>"
                     f"<td class=n>{r['b']:.3f}</td>{_signed(r['delta'])}</tr>")
        h.append("</table>")
    h.append("</body></html>")
    return "\n".join(h) + "\n"


__all__ = ["compare_html"]
