// imagent web UI: helpers shared by the library (library.js) and the search page (app.js).
// Everything from the server is inserted as text (textContent), never as HTML: captions, file names, model
// output and web titles are data.
"use strict";

const $ = (id) => document.getElementById(id);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-") || k.startsWith("aria-") || k === "role") node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) if (c !== null && c !== undefined && c !== "") node.append(c);
  return node;
}

const enc = (id) => encodeURIComponent(id);
const imageUrl = (id) => `/api/images/${enc(id)}`;
const thumbUrl = (id, size = 320) => `/api/thumbnails/${size}/${enc(id)}`;
const photoUrl = (id) => `/photo/${enc(id)}`;
const fileName = (path) => (path ? String(path).split(/[\\/]/).pop() : "");

// ISO 8601 everywhere: "2019-07-14 09:15" (the camera's wall-clock time, as stored).
const isoDay = (iso) => (iso ? String(iso).slice(0, 10) : "");
const isoMinute = (iso) => (iso ? String(iso).replace("T", " ").slice(0, 16) : "");
// "1 result", "2 results" (many: the plural when it is not word + "s": plural(n, "match", "matches")); every count on
// the page goes through it, as the CLI's go through imagent.core.text.plural.
const plural = (n, word, many) => `${n} ${n === 1 ? word : (many || `${word}s`)}`;

function whenWhere(taken, place) {
  return [isoMinute(taken), place || ""].filter(Boolean).join(" · ");
}

// What a screen reader says for a photo: its name, when and where (never an internal id).
function altText(p) {
  const name = p.file || fileName(p.path) || "photo";
  return [p.caption || name, isoMinute(p.taken || p.taken_time), p.place].filter(Boolean).join(", ");
}

function setStatus(text, isError = false) {
  $("status").textContent = text;
  $("status").className = isError ? "error" : "";
}

function errorText(body, status) {
  const d = body && body.detail;
  if (Array.isArray(d)) return d.map((e) => `${(e.loc || []).join(".")}: ${e.msg}`).join("; ");
  return d ? String(d) : `HTTP ${status}`;
}

async function getJson(url) {
  const resp = await fetch(url);
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(errorText(body, resp.status));
  return body;
}

// A thumbnail from the server's cache; a record with no file on disk shows its caption (or name) instead.
function thumb(id, label, size = 320) {
  const text = label || "photo";
  const img = el("img", { class: "thumb", alt: text, loading: "lazy", title: text, decoding: "async" });
  img.src = thumbUrl(id, size);
  img.addEventListener("error", () => img.replaceWith(el("div", { class: "thumb missing", text, role: "img", "aria-label": text })));
  return img;
}

// The filter language (imagent search --where): quoted text.
function quote(text) { return `'${String(text).replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`; }

const records = new Map();  // id -> Promise of its record (date and place under thumbnails in the trace)
function record(id) {
  if (!records.has(id)) {
    records.set(id, fetch(`/api/records/${enc(id)}`).then((r) => (r.ok ? r.json() : null)).catch(() => null));
  }
  return records.get(id);
}

// Arrow keys move between the photos of a grid (left/right: neighbours; up/down: the nearest in the row above or
// below); Enter opens the focused one (it is a link).
function gridKeys(container, selector) {
  container.addEventListener("keydown", (e) => {
    if (!["ArrowLeft", "ArrowRight", "ArrowUp", "ArrowDown", "Home", "End"].includes(e.key)) return;
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const items = [...container.querySelectorAll(selector)];
    const at = items.indexOf(document.activeElement);
    if (at < 0) return;
    let to = at;
    if (e.key === "ArrowRight") to = Math.min(at + 1, items.length - 1);
    else if (e.key === "ArrowLeft") to = Math.max(at - 1, 0);
    else if (e.key === "Home") to = 0;
    else if (e.key === "End") to = items.length - 1;
    else {
      const here = items[at].getBoundingClientRect();
      const down = e.key === "ArrowDown";
      let best = null;
      let bestCost = Infinity;
      for (let i = 0; i < items.length; i += 1) {
        const r = items[i].getBoundingClientRect();
        const dy = down ? r.top - here.top : here.top - r.top;
        if (dy <= 1) continue;  // same row or the wrong way
        const cost = dy * 10000 + Math.abs(r.left - here.left);
        if (cost < bestCost) { bestCost = cost; best = i; }
      }
      if (best === null) return;
      to = best;
    }
    e.preventDefault();
    items[to].focus();
    items[to].scrollIntoView({ block: "nearest" });
  });
}
