// imagent web UI: runs a search through the JSON API and renders the results and every trace step.
// Everything from the server is inserted as text (textContent), never as HTML: captions, model
// output and web titles are data.
"use strict";

const $ = (id) => document.getElementById(id);
const LIST_LIMIT = 20;   // items shown per list before "+N more"
const STRIP_LIMIT = 12;  // thumbnails shown per ranking in a trace step
let methods = {};

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function thumb(id, caption) {
  const img = el("img", { class: "thumb", alt: caption || id, loading: "lazy", title: caption || id });
  img.src = `/api/images/${encodeURIComponent(id)}`;
  // A record with no file on disk (caption-only galleries) shows its caption instead of a broken image.
  img.addEventListener("error", () => img.replaceWith(el("div", { class: "thumb missing", text: caption || id })));
  return img;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

// ------------------------------------------------------------------ rendering trace values

const isRankingPair = (x) => Array.isArray(x) && x.length === 2 && typeof x[0] === "string" && typeof x[1] === "number";
const isIdObject = (x) => x && typeof x === "object" && !Array.isArray(x) && typeof x.id === "string";

function more(total, shown) {
  return total > shown ? el("div", { class: "more", text: `+${total - shown} more` }) : null;
}

function renderScalar(v) {
  if (v === null || v === undefined) return el("span", { class: "more", text: "—" });
  if (typeof v === "number") return el("span", { text: Number.isInteger(v) ? String(v) : v.toFixed(4) });
  return el("span", { text: String(v) });
}

function renderRankingStrip(pairs) {
  const strip = el("div", { class: "strip" });
  for (const [id, score] of pairs.slice(0, STRIP_LIMIT)) {
    strip.append(el("figure", { "data-id": id }, thumb(id), el("figcaption", { text: `${id} ${score.toFixed(3)}`, title: id })));
  }
  return el("div", {}, strip, more(pairs.length, STRIP_LIMIT));
}

function renderIdTable(rows, depth) {
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => k !== "id");
  const table = el("table", { class: "rows" });
  table.append(el("tr", {}, el("th", { text: "" }), el("th", { text: "id" }), ...keys.map((k) => el("th", { text: k }))));
  for (const r of rows.slice(0, LIST_LIMIT)) {
    table.append(el("tr", { "data-id": r.id }, el("td", {}, thumb(r.id)), el("td", { text: r.id }),
      ...keys.map((k) => el("td", {}, renderValue(r[k], depth + 1)))));
  }
  return el("div", {}, table, more(rows.length, LIST_LIMIT));
}

function renderValue(v, depth = 0) {
  if (v === null || typeof v !== "object") return renderScalar(v);
  if (depth > 4) return el("code", { text: JSON.stringify(v) });
  if (Array.isArray(v)) {
    if (v.length === 0) return el("span", { class: "more", text: "(none)" });
    if (v.every(isRankingPair)) return renderRankingStrip(v);
    if (v.every(isIdObject)) return renderIdTable(v, depth);
    if (v.every((x) => x === null || typeof x !== "object")) {
      if (v.length <= 6 && v.every((x) => typeof x !== "string" || x.length < 24)) {
        return el("span", { text: v.map((x) => String(x)).join(", ") });
      }
      const list = el("ol");
      for (const x of v.slice(0, LIST_LIMIT)) list.append(el("li", {}, renderScalar(x)));
      return el("div", {}, list, more(v.length, LIST_LIMIT));
    }
    const list = el("ol");
    for (const x of v.slice(0, LIST_LIMIT)) list.append(el("li", {}, renderValue(x, depth + 1)));
    return el("div", {}, list, more(v.length, LIST_LIMIT));
  }
  return renderKeyValues(v, depth);
}

function renderKeyValues(obj, depth = 0) {
  const dl = el("dl", { class: "kv" });
  for (const [k, v] of Object.entries(obj)) dl.append(el("dt", { text: k }), el("dd", { "data-key": k }, renderValue(v, depth + 1)));
  return dl;
}

function renderStep(step) {
  let cost = `${step.seconds.toFixed(2)} s`;
  if (step.model_calls || step.cached_calls) cost += ` · ${step.model_calls} model calls (${step.cached_calls} cached)`;
  if (step.tool_calls) cost += ` · ${step.tool_calls} tool calls`;
  const box = el("details", { class: "step", open: true, "data-step": step.name },
    el("summary", {}, el("span", { text: step.name }), el("span", { class: "cost", text: cost })));
  for (const n of step.notes) box.append(el("div", { class: "note", text: n }));
  if (Object.keys(step.inputs).length) box.append(el("div", { class: "more", text: "inputs" }), renderKeyValues(step.inputs));
  if (Object.keys(step.outputs).length) box.append(el("div", { class: "more", text: "outputs" }), renderKeyValues(step.outputs));
  return box;
}

function renderTrace(trace) {
  const summary = `${trace.method}: ${trace.model_calls} model calls, ${trace.seconds.toFixed(2)} s`;
  $("trace-summary").replaceChildren(el("p", { text: summary }),
    Object.keys(trace.counters).length ? renderKeyValues(trace.counters) : "");
  $("trace").replaceChildren(...trace.steps.map(renderStep));
}

function renderResults(results) {
  $("results").replaceChildren(...results.map((r) => {
    const use = el("button", { type: "button", class: "use-reference", text: "use as reference" });
    use.addEventListener("click", () => setReference(r.id));
    return el("li", { class: "result", "data-id": r.id },
      thumb(r.id, r.caption),
      el("div", {}, el("span", { class: "rank", text: `#${r.rank}` }), el("span", { class: "score", text: r.score.toFixed(4) })),
      el("div", { class: "caption", text: r.caption }),
      el("div", { class: "id", text: r.id }),
      use);
  }));
}

// ------------------------------------------------------------------ form

async function setReference(id) {
  $("reference").value = id || "";
  const preview = $("reference-preview");
  if (!id) { preview.hidden = true; return; }
  const resp = await fetch(`/api/records/${encodeURIComponent(id)}`);
  if (!resp.ok) { preview.hidden = true; setStatus(`reference ${id}: not in the gallery`, true); return; }
  const rec = await resp.json();
  preview.querySelector("img").src = `/api/images/${encodeURIComponent(id)}`;
  preview.querySelector("figcaption").textContent = rec.captions[0] || id;
  preview.hidden = false;
}

function parseParams(text) {
  const params = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`parameter line needs key=value: ${line}`);
    const key = line.slice(0, at).trim();
    const raw = line.slice(at + 1).trim();
    try { params[key] = JSON.parse(raw); } catch { params[key] = raw; }  // numbers, booleans, lists; else text
  }
  return params;
}

function errorText(body, status) {
  const d = body && body.detail;
  if (Array.isArray(d)) return d.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
  return d ? String(d) : `HTTP ${status}`;
}

async function search(event) {
  event.preventDefault();
  let params;
  try { params = parseParams($("params").value); } catch (e) { setStatus(e.message, true); return; }
  const body = {
    text: $("query").value, method: $("method").value, top_k: Number($("top-k").value) || 10,
    reference: $("reference").value.trim() || null, keep_reference: $("keep-reference").checked, params,
  };
  $("search-button").disabled = true;
  const t0 = performance.now();
  setStatus(`searching with ${body.method}…`);
  try {
    const resp = await fetch("/api/search", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const data = await resp.json().catch(() => null);
    if (!resp.ok) { setStatus(`error: ${errorText(data, resp.status)}`, true); return; }
    renderResults(data.results);
    renderTrace(data.trace);
    setStatus(`${data.results.length} results in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  } catch (e) {
    setStatus(`error: ${e.message}`, true);
  } finally {
    $("search-button").disabled = false;
  }
}

function showDefaults() {
  const m = methods[$("method").value];
  const defaults = m ? Object.entries(m.defaults).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("\n") : "";
  $("method-defaults").textContent = m ? `${m.description}\n\ndefaults:\n${defaults}` : "";
}

async function init() {
  const resp = await fetch("/api/info");
  const info = await resp.json();
  $("gallery-info").textContent = `${info.gallery.size} images · ${info.gallery.root}`;
  for (const m of info.methods) {
    methods[m.name] = m;
    $("method").append(el("option", { value: m.name, text: m.name }));
  }
  const wanted = new URLSearchParams(location.search).get("method");
  $("method").value = methods[wanted] ? wanted : (methods.clip ? "clip" : info.methods[0].name);
  showDefaults();
  $("method").addEventListener("change", showDefaults);
  $("search-form").addEventListener("submit", search);
  $("clear-reference").addEventListener("click", () => setReference(null));
  $("reference").addEventListener("change", () => setReference($("reference").value.trim()));
}

init().catch((e) => setStatus(`could not load: ${e.message}`, true));
