// imagent web UI: the search. One box in plain words (routed: album-style queries to the album method, others
// to the best content search the index supports), filters as chips, results in the same grid with "more";
// under "Advanced": the method, its parameters, a reference image, the filter expression and order, and the
// trace, each step streamed as it happens (server-sent events).
// Everything from the server is inserted as text (textContent), never as HTML.
"use strict";

const LIST_LIMIT = 20;   // items shown per list before "+N more"
const STRIP_LIMIT = 12;  // thumbnails shown per ranking in a trace step
const PHOTO_KEYS = new Set(["photos", "ids"]);  // output fields that hold gallery ids: shown as thumbnails
const MAX_RESULTS = 200; // the server's cap on one search's results
let methods = {};
let limits = {};
let current = null;      // the running search: {id, source, t0, timer, calls, estimate, step}
let upload = null;       // the uploaded reference: {id, url, name}
let likeId = null;       // "more like this": the gallery id the next search ranks by
// What the results on screen came from: {url, body, listing, where, pageSize, page, pages} ("More results" goes on)
let shown = null;
// The query reader's filters the person removed (keys such as "place:Kyoto"): the next search reads those words as
// words. Reset when the words in the box change.
let unlinked = [];
let unlinkedFor = null;  // the text they were removed from

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
  if (step.model_calls || step.cached_calls) cost += ` · ${plural(step.model_calls, "model call")} (${step.cached_calls} cached)`;
  if (step.tool_calls) cost += ` · ${plural(step.tool_calls, "tool call")}`;
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
  const summary = `${trace.method}: ${plural(trace.model_calls, "model call")}, ${trace.seconds.toFixed(2)} s`;
  $("trace-summary").replaceChildren(el("p", { text: summary }),
    Object.keys(trace.counters).length ? renderKeyValues(trace.counters) : "");
}

function renderTrace(trace) {
  renderTraceSummary(trace);
  $("trace").replaceChildren(...trace.steps.map(renderStep));
}


// ------------------------------------------------------------------ result cards

// How well a result matches (the row's `match`: strong, possible or none, from its score against the query's scores
// over the whole library); raw scores stay in the trace and the JSON, never on a card.
const MATCH_TEXT = { strong: "match", possible: "possible match", none: "no match" };

// A photo in the results: its thumbnail (a link to the photo view), file name, how well it matches, date and place.
// Research actions show under Advanced.
function resultCard(r) {
  const name = r.file || fileName(r.path) || "photo";
  const open = el("a", { class: "open", href: photoUrl(r.id), "data-id": r.id, title: `open ${name}` },
    thumb(r.id, altText({ ...r, file: name })));
  const use = el("button", { type: "button", class: "use-reference advanced-only", text: "use as reference" });
  use.addEventListener("click", () => setReference(r.id));
  const like = el("button", { type: "button", class: "more-like advanced-only", text: "more like this" });
  like.addEventListener("click", () => moreLike(r.id));
  const level = typeof r.match === "string" && MATCH_TEXT[r.match]
    ? el("span", { class: `match match-${r.match}`, text: MATCH_TEXT[r.match] }) : null;
  const labels = Array.isArray(r.labels) && r.labels.length
    ? el("div", { class: "tags" }, ...r.labels.slice(0, 4).map((l) => chipLink("label", l.name, l.name))) : null;
  const people = Array.isArray(r.people) && r.people.some((x) => x.name)
    ? el("div", { class: "tags" }, ...r.people.filter((x) => x.name).map((x) => chipLink("person", x.name, x.name))) : null;
  return el("li", { class: "result", "data-id": r.id },
    open,
    el("div", { class: "file", text: name, title: name }, level),
    el("div", { class: "when-where", text: whenWhere(r.taken, r.place) }),
    r.caption ? el("div", { class: "caption", text: r.caption }) : null,
    labels, people,
    el("div", { class: "card-actions advanced-only" }, use, like));
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

// Where the shown results came from when they are not the method's own answer (Result.source): a named
// fallback, or an error whose never-empty stand-in is shown so the page is not empty.
function sourceNote(source, reason) {
  if (!source || source === "method") return "";
  const why = reason ? `: ${reason}` : "";
  if (source === "error") return `The method could not answer (error${why}). Shown instead: a stand-in, so the page is never empty.`;
  return `Not the method's own answer: ${source.replace("fallback:", "fallback ")}${why}.`;
}

function addCards(list, items, append) {
  const have = new Set(append ? [...list.children].map((c) => c.dataset.id) : []);
  const cards = items.filter((r) => !have.has(r.id)).map(resultCard);
  if (append) list.append(...cards); else list.replaceChildren(...cards);
  return cards.length;
}

// What the query reader understood of the words (people, places, dates: filters; the rest: what is looked for), as
// chips; removing one runs the search again with those words read as words (the request's unlink).
function renderUnderstood(u) {
  const box = $("understood-box");
  if (!u || (!u.understood.length && !u.notes.length)) { box.hidden = true; $("understood").replaceChildren(); return; }
  const chips = u.understood.map((c) => {
    const x = el("button", { type: "button", class: "chip-remove", text: "×", "aria-label": `Search without ${c.label}` });
    x.addEventListener("click", () => {
      if (!unlinked.includes(c.key)) unlinked.push(c.key);
      unlinkedFor = $("query").value.trim();
      runSearch(true);
    });
    return el("li", { class: `chip understood-${c.kind}`, "data-key": c.key, title: c.where }, el("span", { text: c.label }), x);
  });
  if (u.content) chips.push(el("li", { class: "chip content", title: "searched for" }, el("span", { text: u.content })));
  if (u.trip_day !== null && u.trip_day !== undefined) {
    chips.push(el("li", { class: "chip content" }, el("span", { text: `day ${u.trip_day > 0 ? u.trip_day : "last"} of a trip` })));
  }
  $("understood").replaceChildren(...chips);
  const notes = $("understood-notes");
  notes.textContent = u.notes.join(" · ");
  notes.hidden = !u.notes.length;
  box.hidden = false;
}

function renderResults(data, append = false) {
  renderUnderstood(data.understood);
  const note = sourceNote(data.source, data.source_reason);
  $("source-note").hidden = !note;
  $("source-note").textContent = note;
  renderFilter(data.filter);
  renderMatches(data.results, append);
  if (!append) showEmptyHint(data.results.length ? [] : (data.warnings || []));
  const answer = data.answer_set;
  $("answer-box").hidden = !Array.isArray(answer);
  if (Array.isArray(answer)) {
    addCards($("answer"), data.answer || answer.map((id) => ({ id, caption: "" })), false);
    $("answer-count").textContent = plural(answer.length, "photo");
  }
}

// Why a search or a filter found nothing, when the server says it (a near miss: "no photo's place is exactly
// 'Kyoto'; ... use place ~ 'Kyoto'"), in the match note above the empty results.
function showEmptyHint(lines) {
  const note = $("match-note");
  if (!lines.length) return;
  note.textContent = lines.join(" ");
  note.hidden = false;
}

// The results of a search, stopped where its matches stop: the strong matches, then the possible ones folded, then
// nothing (rows without a level, a method's own ranking, are all shown). With "results per page" set, every result
// asked for is shown with its level, as `imagent search --top-k` does.
function renderMatches(rows, append) {
  const levelled = rows.some((r) => typeof r.match === "string");
  const cut = levelled && shown && shown.cut;
  const strong = cut ? rows.filter((r) => r.match === "strong") : rows;
  const possible = cut ? rows.filter((r) => r.match === "possible") : [];
  addCards($("results"), strong, append);
  addCards($("possible"), possible, append);
  const nStrong = $("results").children.length;
  const nPossible = $("possible").children.length;
  $("possible-count").textContent = `(${nPossible})`;
  $("possible-box").hidden = !nPossible;
  if (!append) $("possible-box").open = false;
  if (shown) {
    shown.levels = Boolean(cut);  // shown as matches (the count says "matches")
    shown.ended = Boolean(cut) && strong.length + possible.length < rows.length;  // a result below the matches came
  }
  const note = $("match-note");
  note.hidden = !cut;
  if (!cut) return;
  if (!nStrong && !nPossible) note.textContent = "No photo matches this search: the closest ones scored like the rest of the library.";
  else if (!nStrong) note.textContent = "No clear match; the possible ones are below.";
  else note.textContent = shown.ended ? "The other photos did not match." : "";
  note.hidden = !note.textContent;
}

function updateMore() {
  const n = $("results").children.length + $("possible").children.length;
  let more = false;
  if (shown && shown.listing) more = shown.page < shown.pages - 1;
  else if (shown) more = !shown.ended && n >= shown.topK && shown.topK < MAX_RESULTS;
  $("results-more").hidden = !more;
  const matches = (k) => `${k} ${k === 1 ? "match" : "matches"}`;
  const nPossible = $("possible").children.length;
  let count = plural(n, "result");
  if (shown && shown.listing) count = `${n} of ${plural(shown.total, "photo")}`;
  else if (shown && shown.levels) count = matches(n - nPossible) + (nPossible ? `, ${nPossible} possible` : "");
  $("search-count").textContent = count;
}
// ------------------------------------------------------------------ reference

async function setReference(id) {
  clearUpload();
  $("reference").value = id || "";
  if (id) $("advanced").open = true;  // the reference and its preview are under Advanced
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
  $("advanced").open = true;  // the reference and its preview are under Advanced
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

function liveStatus() {
  if (!current) return;
  const secs = ((performance.now() - current.t0) / 1000).toFixed(1);
  const est = current.estimate ? ` / ~${current.estimate}` : "";
  const step = current.step ? `step ${current.step} · ` : "";
  setStatus(`searching with ${current.method}… ${step}${current.calls}${est} model call${current.calls === 1 && !est ? "" : "s"} · ${secs} s`);
}

function finish(message, isError) {
  if (!current) return;
  current.source.close();
  clearInterval(current.timer);
  current = null;
  $("results").classList.remove("stale");
  $("possible").classList.remove("stale");
  $("answer-box").classList.remove("stale");
  $("search-button").disabled = false;
  $("results-more").disabled = false;
  $("cancel-button").hidden = true;
  setStatus(message, isError);
}

function onEvent(name, handler) {
  // The server's "error" event shares its name with EventSource's own connection error (no data).
  current.source.addEventListener(name, (ev) => { if (current && typeof ev.data === "string") handler(JSON.parse(ev.data)); });
}

// The address of a search: its words, filters, "more like this" photo and (when one was picked) method.
function searchUrl(text, like) {
  const q = new URLSearchParams();
  if (text) q.set("q", text);
  for (const [id, key] of [["date-from", "from"], ["date-to", "to"], ["place", "place"], ["where", "where"]]) {
    const v = $(id).value.trim();
    if (v) q.set(key, v);
  }
  for (const c of extraChips) q.append(c.kind, c.value);
  if (text) for (const key of unlinked) q.append("not", key);
  if (like) q.set("like", like);
  if ($("method").value !== "auto") q.set("method", $("method").value);
  const s = q.toString();
  return `/search${s ? `?${s}` : ""}`;
}

// /search?... opened (a shared address, back or forward): the results on screen if they are that search's,
// else the search run again from the address.
function showSearchFromUrl() {
  if (shown && shown.url === location.pathname + location.search) {
    showView("search");
    restoreScroll();
    return;
  }
  const q = new URLSearchParams(location.search);
  $("query").value = q.get("q") || "";
  for (const [id, key] of [["date-from", "from"], ["date-to", "to"], ["place", "place"], ["where", "where"]]) {
    $(id).value = q.get(key) || "";
  }
  extraChips.length = 0;
  for (const kind of ["label", "person"]) {
    for (const v of q.getAll(kind)) {
      extraChips.push({ kind, value: v, expr: chipExpr(kind, v), label: `${kind === "label" ? "Label" : "Person"}: ${v}` });
    }
  }
  const method = q.get("method");
  if (method && methods[method]) $("method").value = method;
  unlinked = q.getAll("not");
  unlinkedFor = (q.get("q") || "").trim();
  likeId = q.get("like");
  renderChips();
  runSearch(false);
}

function search(event) {
  event.preventDefault();
  runSearch(true);
}

function moreLike(id) {
  likeId = id;
  $("query").value = "";
  setReference(null);
  $("search-form").requestSubmit();
}

// "More like this": the photo the results are like, above them (its thumbnail, name, when and where).
async function showLikePhoto(id) {
  const box = $("like-box");
  box.hidden = !id;
  if (!id) return;
  $("like-img").src = thumbUrl(id);
  $("like-link").href = photoUrl(id);
  $("like-name").textContent = "this photo";
  $("like-when").textContent = "";
  try {
    const p = await getJson(`/api/photos/${enc(id)}`);
    $("like-img").alt = altText(p);
    $("like-name").textContent = p.file;
    $("like-when").textContent = whenWhere(p.taken, p.place);
  } catch (e) { /* the results still show; the photo may be gone from the library */ }
}

function showRoute(r) {
  const note = $("route-note");
  if (r.fallback) note.textContent = `Searched by content (${r.method}): ${r.fallback}.`;
  else if (r.kind === "album") note.textContent = `An album search (${r.method}): ${r.reason}.`;
  else if (r.kind === "filter") note.textContent = `Listed, no model: ${r.reason}.`;
  else note.textContent = `Searched with ${r.method}: ${r.reason}.`;
  note.className = r.fallback ? "warning" : "muted";
  note.hidden = false;
}

async function runSearch(push) {
  let params;
  try { params = parseParams($("params").value); } catch (e) { setStatus(e.message, true); return; }
  const text = $("query").value;
  const like = likeId;
  likeId = null;
  if (text.trim() !== unlinkedFor) { unlinked = []; unlinkedFor = text.trim(); }  // new words: read them afresh
  const reference = upload ? null : ($("reference").value.trim() || null);
  let where = buildWhere();
  const url = searchUrl(like ? "" : text.trim(), like);
  if (!text.trim() && !reference && !upload && !where && !like) {  // nothing to look for: the library
    if (push) navigate("/"); else showLibrary();
    return;
  }
  if (push) {
    if (url !== location.pathname + location.search) history.pushState({}, "", url);
  }
  showView("search");
  showLikePhoto(like);
  document.title = `${like ? "More like this" : (text.trim() || "Search")} · ${lib.name || "imagent"}`;
  const pageSize = Math.min(Number($("top-k").value) || 60, MAX_RESULTS);
  const cut = !$("top-k").value;  // no number asked for: the results stop where the matches stop
  if (where && !text.trim() && !reference && !upload && !like) {  // a filter alone: its photos in time order
    await runListing({ url, where, pageSize, page: 0 }, false);
    return;
  }
  let method = $("method").value;
  let readQuery = false;  // a plain-words search reads its question (people, places, dates become filters)
  $("route-note").hidden = true;
  $("understood-box").hidden = true;
  if (method === "auto") {
    if (reference || upload) method = "clip";  // a composed query: the clip baseline fuses text and image
    else {
      try {
        const nots = unlinked.map((k) => `&unlink=${enc(k)}`).join("");
        const r = await getJson(`/api/route?text=${enc(like ? "" : text)}${nots}`);
        method = r.method;
        readQuery = !like && Boolean(text.trim());
        if (!like) { showRoute(r); renderUnderstood(r.understood); }
      } catch (e) { setStatus(`error: ${e.message}`, true); return; }
    }
  }
  if (!where) where = null;
  const body = {
    text: like ? "" : text, method, top_k: pageSize, reference, reference_upload: upload ? upload.id : null,
    keep_reference: $("keep-reference").checked, params, where, sort: $("sort").value, like,
    read_query: readQuery, unlink: readQuery ? unlinked : [],
  };
  await startSearch(body, { url, body, topK: pageSize, pageSize, listing: false, cut }, false);
}

// A filter alone: its matching photos, oldest first, a page at a time (no method, no score).
async function runListing(state, append) {
  const t0 = performance.now();
  $("search-button").disabled = true;
  $("results-more").disabled = true;
  if (!append) $("results").classList.add("stale");
  let data;
  try {
    data = await getJson(`/api/library?where=${enc(state.where)}&page=${state.page}&per_page=${state.pageSize}`);
  } catch (e) {
    setStatus(`error: ${e.message}`, true);
    return;
  } finally {
    $("search-button").disabled = false;
    $("results-more").disabled = false;
    $("results").classList.remove("stale");
  }
  shown = { ...state, listing: true, pages: data.pages, total: data.total };
  for (const id of ["route-note", "source-note", "answer-box", "understood-box", "possible-box", "match-note"]) $(id).hidden = true;
  $("possible").replaceChildren();
  renderFilter({ where: state.where, sort: "time", matches: data.total });
  addCards($("results"), data.photos, append);
  showEmptyHint(data.total ? [] : [data.hint || "No photo matches this filter."]);
  $("trace-summary").replaceChildren(el("p", { text: `filter: ${plural(data.total, "match", "matches")}, in time order, no model` }));
  $("trace").replaceChildren();
  updateMore();
  setStatus(`${plural($("results").children.length, "result")} in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}

function moreResults() {
  if (!shown || current) return;
  if (shown.listing) {
    runListing({ ...shown, page: shown.page + 1 }, true);
    return;
  }
  const topK = Math.min(shown.topK + shown.pageSize, MAX_RESULTS);
  startSearch({ ...shown.body, top_k: topK }, { ...shown, topK }, true);
}

async function startSearch(body, state, append) {
  $("search-button").disabled = true;
  $("results-more").disabled = true;
  let resp, data;
  try {
    resp = await fetch("/api/searches", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    data = await resp.json().catch(() => null);
  } catch (e) {
    $("search-button").disabled = false;
    $("results-more").disabled = false;
    setStatus(`error: ${e.message}`, true);
    return;
  }
  if (!resp.ok) {  // refused before it started: the previous results stay as they were
    $("search-button").disabled = false;
    $("results-more").disabled = false;
    setStatus(`error: ${errorText(data, resp.status)}`, true);
    return;
  }
  current = { id: data.id, method: body.like ? "like" : body.method, t0: performance.now(), calls: 0, estimate: data.estimate, step: "" };
  current.source = new EventSource(data.events);
  current.timer = setInterval(liveStatus, 250);
  $("results").classList.add("stale");  // old results stay visible, dimmed, until the new ones arrive
  $("possible").classList.add("stale");
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
    shown = state;
    renderResults(p, append);
    renderTrace(p.trace);
    updateMore();
    const n = $("results").children.length + $("possible").children.length;
    finish(`${plural(n, "result")} in ${((performance.now() - current.t0) / 1000).toFixed(1)} s`, false);
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
  await fetch(`/api/searches/${enc(current.id)}/cancel`, { method: "POST" }).catch(() => null);
}

function showDefaults() {
  const name = $("method").value;
  if (name === "auto") {
    $("method-defaults").textContent = "auto: album-style queries (a relation to another photo or event: \"the day I "
      + "saw ...\", \"my other visit to ...\") go to the album method; others to the best content search this "
      + "library supports; a reference image to clip.";
    return;
  }
  const m = methods[name];
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
  setupLibrary();
  setupPhotoView();
  setupChips();
  interceptLinks();
  window.addEventListener("popstate", route);
  $("search-form").addEventListener("submit", search);
  $("cancel-button").addEventListener("click", cancelSearch);
  $("results-more").addEventListener("click", moreResults);
  $("clear-reference").addEventListener("click", () => setReference(null));
  $("reference").addEventListener("change", () => setReference($("reference").value.trim()));
  $("advanced").addEventListener("toggle", () => document.body.classList.toggle("advanced", $("advanced").open));
  setupDrop();
  const info = await getJson("/api/info");
  limits = info.limits || {};
  $("method").append(el("option", { value: "auto", text: "auto (chosen for the query)" }));
  for (const m of info.methods) {
    methods[m.name] = m;
    $("method").append(el("option", { value: m.name, text: m.name }));
  }
  const wanted = new URLSearchParams(location.search).get("method");
  $("method").value = methods[wanted] ? wanted : "auto";
  if (methods[wanted]) $("advanced").open = true;
  showDefaults();
  $("method").addEventListener("change", showDefaults);
  loadLibraryInfo();
  route();
}

init().catch((e) => setStatus(`could not load: ${e.message}`, true));
