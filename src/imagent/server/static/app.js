// imagent web UI: starts a search through the JSON API, streams its trace steps as they happen
// (server-sent events), and renders the results, the answer set and every step.
// Everything from the server is inserted as text (textContent), never as HTML: captions, model
// output and web titles are data.
"use strict";

const $ = (id) => document.getElementById(id);
const LIST_LIMIT = 20;   // items shown per list before "+N more"
const STRIP_LIMIT = 12;  // thumbnails shown per ranking in a trace step
const PHOTO_KEYS = new Set(["photos", "ids"]);  // output fields that hold gallery ids: shown as thumbnails
let methods = {};
let limits = {};
let current = null;      // the running search: {id, source, t0, timer, calls, estimate, step}
let upload = null;       // the uploaded reference: {id, url, name}
let likeId = null;       // "more like this": the gallery id the next search ranks by
const records = new Map();  // id -> Promise of its record (date and place under thumbnails)

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

const imageUrl = (id) => `/api/images/${encodeURIComponent(id)}`;

function thumb(id, caption) {
  const img = el("img", { class: "thumb", alt: caption || id, loading: "lazy", title: caption || id });
  img.src = imageUrl(id);
  // A record with no file on disk (caption-only galleries) shows its caption instead of a broken image.
  img.addEventListener("error", () => img.replaceWith(el("div", { class: "thumb missing", text: caption || id })));
  return img;
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function record(id) {
  if (!records.has(id)) {
    records.set(id, fetch(`/api/records/${encodeURIComponent(id)}`).then((r) => (r.ok ? r.json() : null)).catch(() => null));
  }
  return records.get(id);
}

const shortDate = (iso) => (iso ? iso.replace("T", " ").slice(0, 16) : "");

function whenWhere(taken, place) {
  return [shortDate(taken), place || ""].filter(Boolean).join(" · ");
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

// Gallery ids a step returned (an agent turn's photos): thumbnails with their date and place.
function renderPhotoStrip(ids) {
  const strip = el("div", { class: "strip photos" });
  for (const id of ids.slice(0, STRIP_LIMIT)) {
    const meta = el("div", { class: "when-where" });
    const fig = el("figure", { "data-id": id }, thumb(id), el("figcaption", { text: id, title: id }), meta);
    record(id).then((rec) => { if (rec) meta.textContent = whenWhere(rec.taken_time, rec.place); });
    strip.append(fig);
  }
  return el("div", {}, strip, more(ids.length, STRIP_LIMIT));
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

function renderValue(v, depth = 0, key = "") {
  if (v === null || typeof v !== "object") return renderScalar(v);
  if (depth > 4) return el("code", { text: JSON.stringify(v) });
  if (Array.isArray(v)) {
    if (v.length === 0) return el("span", { class: "more", text: "(none)" });
    if (PHOTO_KEYS.has(key) && v.every((x) => typeof x === "string")) return renderPhotoStrip(v);
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
  for (const [k, v] of Object.entries(obj)) dl.append(el("dt", { text: k }), el("dd", { "data-key": k }, renderValue(v, depth + 1, k)));
  return dl;
}

function stepCost(step) {
  let cost = `${step.seconds.toFixed(2)} s`;
  if (step.model_calls || step.cached_calls) cost += ` · ${step.model_calls} model calls (${step.cached_calls} cached)`;
  if (step.tool_calls) cost += ` · ${step.tool_calls} tool calls`;
  return cost;
}

// An agent's turn (imagent.agents.runtime's outputs: its reasoning and tool calls, or its answer), told by its
// outputs, never by the step's name: what it thought, the tool it called and with what, what came back, and the
// photos it returned.
function isTurn(out) {
  return Boolean(out) && "reasoning" in out && ("tool" in out || "calls" in out || "answer" in out);
}

function renderTurn(box, out) {
  const shown = new Set(["reasoning", "tool", "arguments", "observation", "photos", "calls"]);
  if (out.reasoning) box.append(el("p", { class: "reasoning", text: out.reasoning }));
  if (out.tool) {
    box.append(el("div", { class: "tool-call" }, el("span", { class: "tool", text: out.tool }),
      el("code", { text: out.arguments == null ? "" : JSON.stringify(out.arguments) })));
  }
  if (out.observation) box.append(el("pre", { class: "observation", text: String(out.observation) }));
  if (Array.isArray(out.photos) && out.photos.length) box.append(renderPhotoStrip(out.photos));
  const rest = Object.fromEntries(Object.entries(out).filter(([k]) => !shown.has(k)));
  if (Object.keys(rest).length) box.append(renderKeyValues(rest));
}

function renderStep(step) {
  const box = el("details", { class: "step", open: true, "data-step": step.name },
    el("summary", {}, el("span", { text: step.name }), el("span", { class: "cost", text: stepCost(step) })));
  for (const n of step.notes) box.append(el("div", { class: "note", text: n }));
  if (isTurn(step.outputs)) {
    box.classList.add("turn");
    renderTurn(box, step.outputs);
    return box;
  }
  if (Object.keys(step.inputs).length) box.append(el("div", { class: "more", text: "inputs" }), renderKeyValues(step.inputs));
  if (Object.keys(step.outputs).length) box.append(el("div", { class: "more", text: "outputs" }), renderKeyValues(step.outputs));
  return box;
}

function runningStep(name, index) {
  return el("details", { class: "step running", open: true, "data-step": name, "data-index": String(index) },
    el("summary", {}, el("span", { text: name }), el("span", { class: "cost", text: "running…" })));
}

function renderTraceSummary(trace) {
  const summary = `${trace.method}: ${trace.model_calls} model calls, ${trace.seconds.toFixed(2)} s`;
  $("trace-summary").replaceChildren(el("p", { text: summary }),
    Object.keys(trace.counters).length ? renderKeyValues(trace.counters) : "");
}

function renderTrace(trace) {
  renderTraceSummary(trace);
  $("trace").replaceChildren(...trace.steps.map(renderStep));
}

const fileName = (path) => (path ? String(path).split(/[\\/]/).pop() : "");

function resultCard(r) {
  const use = el("button", { type: "button", class: "use-reference", text: "use as reference" });
  use.addEventListener("click", () => setReference(r.id));
  const like = el("button", { type: "button", class: "more-like", text: "more like this" });
  like.addEventListener("click", () => {  // rank by this photo alone (the filters still apply)
    likeId = r.id;
    $("query").value = "";
    setReference(null);
    $("search-form").requestSubmit();
  });
  // The thumbnail opens the full photo (the same checked file the thumbnail is) in a new tab.
  const open = el("a", { class: "open", href: imageUrl(r.id), target: "_blank", rel: "noopener", title: "open the full photo" },
    thumb(r.id, r.caption));
  return el("li", { class: "result", "data-id": r.id },
    open,
    r.rank === undefined ? null
      : el("div", {}, el("span", { class: "rank", text: `#${r.rank}` }), el("span", { class: "score", text: r.score.toFixed(4) })),
    el("div", { class: "file", text: r.file || fileName(r.path) || r.id, title: r.path || "" }),
    el("div", { class: "caption", text: r.caption }),
    el("div", { class: "when-where", text: whenWhere(r.taken, r.place) }),
    el("div", { class: "id", text: r.id }),
    use, like);
}

// The filter a search ran with, shown above its results.
function renderFilter(filter) {
  const box = $("filter-shown");
  if (!filter || (!filter.where && filter.sort !== "time")) { box.hidden = true; box.replaceChildren(); return; }
  const parts = [];
  if (filter.where) {
    parts.push("only photos where ", el("code", { text: filter.where }));
    if (typeof filter.matches === "number") parts.push(` (${filter.matches} match)`);
  }
  if (filter.sort === "time") parts.push(parts.length ? "; " : "", "in time order");
  box.replaceChildren(...parts);
  box.hidden = false;
}

// The date range, place box and expression field as one filter expression (the language of --where).
function quote(text) { return `'${String(text).replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`; }

function buildWhere() {
  const parts = [];
  const from = $("date-from").value, to = $("date-to").value, place = $("place").value.trim();
  const expr = $("where").value.trim();
  if (from) parts.push(`time >= ${quote(from)}`);
  if (to) parts.push(`time <= ${quote(to)}`);  // a day is the whole day
  if (place) parts.push(`place ~ ${quote(place)}`);
  if (expr) parts.push(parts.length ? `(${expr})` : expr);
  return parts.length ? parts.join(" and ") : null;
}

// Where the shown results came from when they are not the method's own answer (Result.source): a named
// fallback, or an error whose never-empty stand-in is shown so the page is not empty.
function sourceNote(source, reason) {
  if (!source || source === "method") return "";
  const why = reason ? `: ${reason}` : "";
  if (source === "error") return `The method could not answer (error${why}). Shown instead: a stand-in, so the page is never empty.`;
  return `Not the method's own answer: ${source.replace("fallback:", "fallback ")}${why}.`;
}

function renderResults(data) {
  const note = sourceNote(data.source, data.source_reason);
  $("source-note").hidden = !note;
  $("source-note").textContent = note;
  renderFilter(data.filter);
  $("results").replaceChildren(...data.results.map(resultCard));
  const answer = data.answer_set;
  $("answer-box").hidden = !Array.isArray(answer);
  if (Array.isArray(answer)) {
    const cards = (data.answer || answer.map((id) => ({ id, caption: "" }))).map(resultCard);
    $("answer").replaceChildren(...cards);
    $("answer-count").textContent = `${answer.length} photo${answer.length === 1 ? "" : "s"}`;
  }
}

// ------------------------------------------------------------------ reference

async function setReference(id) {
  clearUpload();
  $("reference").value = id || "";
  const preview = $("reference-preview");
  if (!id) { preview.hidden = true; return; }
  const rec = await record(id);
  if (!rec) { preview.hidden = true; setStatus(`reference ${id}: not in the gallery`, true); return; }
  preview.querySelector("img").src = imageUrl(id);
  preview.querySelector("figcaption").textContent = rec.captions[0] || id;
  preview.hidden = false;
}

function clearUpload() {
  if (upload) URL.revokeObjectURL(upload.url);
  upload = null;
  $("upload-input").value = "";
}

async function uploadReference(file) {
  if (!file) return;
  if (limits.max_upload_bytes && file.size > limits.max_upload_bytes) {
    setStatus(`${file.name}: too large (${(file.size / 1e6).toFixed(1)} MB; limit ${(limits.max_upload_bytes / 1e6).toFixed(1)} MB)`, true);
    return;
  }
  setStatus(`uploading ${file.name}…`);
  // The server takes only image/... uploads; a file the browser cannot type (HEIC on some systems) is named by
  // its extension, and the server checks the bytes either way.
  const type = file.type.startsWith("image/") ? file.type : `image/${(file.name.split(".").pop() || "unknown").toLowerCase()}`;
  // The file name travels with it: the reference keeps its name (and its name's words).
  const resp = await fetch(`/api/uploads?name=${encodeURIComponent(file.name)}`,
    { method: "POST", body: file, headers: { "Content-Type": type } });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) {  // the old results no longer go with what is on screen: dim them
    $("results").classList.add("stale");
    setStatus(`${file.name}: ${errorText(body, resp.status)}`, true);
    return;
  }
  if (body.gallery_id) {  // the same image is in the gallery: use its record (caption, vectors)
    await setReference(body.gallery_id);
    setStatus(`${file.name} is gallery image ${body.gallery_id}: using it as the reference`);
    return;
  }
  clearUpload();
  upload = { id: body.upload_id, url: URL.createObjectURL(file), name: file.name };
  $("reference").value = "";
  const preview = $("reference-preview");
  preview.querySelector("img").src = upload.url;  // the page's own copy: uploads are never served back
  preview.querySelector("figcaption").textContent = `${file.name} (uploaded, ${body.width}×${body.height})`;
  preview.hidden = false;
  setStatus(`${file.name} uploaded: it is the reference of the next search`);
}

// ------------------------------------------------------------------ search

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

function liveStatus() {
  if (!current) return;
  const secs = ((performance.now() - current.t0) / 1000).toFixed(1);
  const est = current.estimate ? ` / ~${current.estimate}` : "";
  const step = current.step ? `step ${current.step} · ` : "";
  setStatus(`searching with ${current.method}… ${step}${current.calls}${est} model calls · ${secs} s`);
}

function finish(message, isError) {
  if (!current) return;
  current.source.close();
  clearInterval(current.timer);
  current = null;
  $("results").classList.remove("stale");
  $("answer-box").classList.remove("stale");
  $("search-button").disabled = false;
  $("cancel-button").hidden = true;
  setStatus(message, isError);
}

function onEvent(name, handler) {
  // The server's "error" event shares its name with EventSource's own connection error (no data).
  current.source.addEventListener(name, (ev) => { if (current && typeof ev.data === "string") handler(JSON.parse(ev.data)); });
}

async function search(event) {
  event.preventDefault();
  let params;
  try { params = parseParams($("params").value); } catch (e) { setStatus(e.message, true); return; }
  const body = {
    text: $("query").value, method: $("method").value, top_k: Number($("top-k").value) || 10,
    reference: upload ? null : ($("reference").value.trim() || null), reference_upload: upload ? upload.id : null,
    keep_reference: $("keep-reference").checked, params, where: buildWhere(), sort: $("sort").value, like: likeId,
  };
  likeId = null;
  if (!body.text.trim() && !body.reference && !body.reference_upload && !body.where && !body.like) {
    setStatus("type a query, pick a reference, or give a date, place or where filter", true);
    return;
  }
  $("search-button").disabled = true;
  let resp, data;
  try {
    resp = await fetch("/api/searches", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    data = await resp.json().catch(() => null);
  } catch (e) {
    $("search-button").disabled = false;
    setStatus(`error: ${e.message}`, true);
    return;
  }
  if (!resp.ok) {  // refused before it started: the previous results stay as they were
    $("search-button").disabled = false;
    setStatus(`error: ${errorText(data, resp.status)}`, true);
    return;
  }
  const filterOnly = body.where && !body.text.trim() && !body.reference && !body.reference_upload && !body.like;
  current = { id: data.id, method: body.like ? "like" : (filterOnly ? "filter" : body.method), t0: performance.now(), calls: 0, estimate: data.estimate, step: "" };
  current.source = new EventSource(data.events);
  current.timer = setInterval(liveStatus, 250);
  $("results").classList.add("stale");  // old results stay visible, dimmed, until the new ones arrive
  $("answer-box").classList.add("stale");
  $("cancel-button").hidden = false;
  $("cancel-button").disabled = false;
  $("trace").replaceChildren();
  $("trace-summary").replaceChildren(el("p", { text: `${body.method}: running` }));
  liveStatus();
  onEvent("step_start", (p) => {
    current.step = p.name;
    $("trace").append(runningStep(p.name, p.index));
  });
  onEvent("step_end", (p) => {
    const node = $("trace").querySelector(`.step.running[data-index="${p.index}"]`);
    const done = renderStep(p);
    if (node) node.replaceWith(done); else $("trace").append(done);
  });
  onEvent("call", (p) => { if (p.kind === "chat" && !p.cached) current.calls += 1; liveStatus(); });
  onEvent("result", (p) => {
    renderResults(p);
    renderTrace(p.trace);
    finish(`${p.results.length} results in ${((performance.now() - current.t0) / 1000).toFixed(1)} s`, false);
  });
  onEvent("error", (p) => {
    if (p.trace) renderTraceSummary(p.trace);
    finish(`error: ${p.detail}`, true);
  });
  onEvent("cancelled", (p) => {
    if (p.trace) renderTraceSummary(p.trace);
    $("trace").querySelectorAll(".step.running .cost").forEach((c) => { c.textContent = "cancelled"; });
    finish("search cancelled; the previous results are still shown", false);
  });
  current.source.onerror = () => {
    // The browser reconnects on its own (the server replays what was missed); a closed stream ends it.
    if (current && current.source.readyState === EventSource.CLOSED) finish("lost the connection to the server", true);
  };
}

async function cancelSearch() {
  if (!current) return;
  $("cancel-button").disabled = true;
  setStatus("cancelling…");
  await fetch(`/api/searches/${encodeURIComponent(current.id)}/cancel`, { method: "POST" }).catch(() => null);
}

function showDefaults() {
  const m = methods[$("method").value];
  const defaults = m ? Object.entries(m.defaults).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join("\n") : "";
  $("method-defaults").textContent = m ? `${m.description}\n\ndefaults:\n${defaults}` : "";
}

function setupDrop() {
  const zone = $("reference-row");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("dragging"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("dragging"));
  zone.addEventListener("drop", (e) => {
    e.preventDefault();
    zone.classList.remove("dragging");
    const file = e.dataTransfer && e.dataTransfer.files[0];
    if (file) uploadReference(file);
  });
  $("upload-input").addEventListener("change", () => uploadReference($("upload-input").files[0]));
}

async function init() {
  const resp = await fetch("/api/info");
  if (!resp.ok) throw new Error(errorText(await resp.json().catch(() => null), resp.status));
  const info = await resp.json();
  limits = info.limits || {};
  const folders = (info.gallery.sources || []).join(", ");
  $("gallery-info").textContent = `${info.gallery.size} images` + (folders ? ` from ${folders}` : "") + ` · index ${info.gallery.root}`;
  for (const m of info.methods) {
    methods[m.name] = m;
    $("method").append(el("option", { value: m.name, text: m.name }));
  }
  const wanted = new URLSearchParams(location.search).get("method");
  $("method").value = methods[wanted] ? wanted : (methods.clip ? "clip" : info.methods[0].name);
  showDefaults();
  $("method").addEventListener("change", showDefaults);
  $("search-form").addEventListener("submit", search);
  $("cancel-button").addEventListener("click", cancelSearch);
  $("clear-reference").addEventListener("click", () => setReference(null));
  $("reference").addEventListener("change", () => setReference($("reference").value.trim()));
  setupDrop();
}

init().catch((e) => setStatus(`could not load: ${e.message}`, true));
