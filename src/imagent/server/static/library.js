// imagent web UI: the library (a grid of thumbnails grouped by day, newest first, paged, with a month jump),
// the photo view (/photo/<id>: the photo large with its date, place, camera, labels, people, file and folder;
// previous / next; more like this), the filter chips, and the page's addresses (back and forward work). The People
// page (/people, /people/<group>) is people.js.
"use strict";

// The views the header links to (a view not listed here highlights the entry of its parent: a person, People).
const NAV = [{ view: "library", href: "/", label: "Library" }, { view: "people", href: "/people", label: "People" }];
const NAV_PARENT = { person: "people" };

const lib = { first: 0, last: -1, pages: 0, perPage: 60, total: 0, loading: false, loaded: false, name: "" };
let cameFrom = null;       // the grid a photo was opened from: {url, scrollY, id, ids} (back returns there)
let currentPhoto = null;   // the photo shown in the photo view (its /api/photos record)
const extraChips = [];     // filters added by a click on a label or a person: {label, expr}

// ------------------------------------------------------------------ views and addresses

function renderNav() {
  $("main-nav").replaceChildren(...NAV.map((n) => el("a", { href: n.href, text: n.label, "data-nav": n.view })));
}

function showView(name) {
  for (const v of ["library", "search", "photo", "people", "person"]) $(`${v}-view`).hidden = v !== name;
  const nav = NAV_PARENT[name] || name;
  for (const a of document.querySelectorAll("#main-nav a")) {
    if (a.dataset.nav === nav) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  document.body.dataset.view = name;
}

function navigate(url, replace = false) {
  const here = location.pathname + location.search;
  if (url === here && !replace) { route(); return; }
  if (replace) history.replaceState({}, "", url); else history.pushState({}, "", url);
  route();
}

// The view for the current address: /photo/<id>, /search?..., /people, /people/<group>, or the library.
function route() {
  const path = location.pathname;
  if (path.startsWith("/photo/")) {
    openPhoto(decodeURIComponent(path.slice("/photo/".length)));
  } else if (path === "/people" || path === "/people/") {
    showPeople();  // people.js
  } else if (path.startsWith("/people/")) {
    showPerson(decodeURIComponent(path.slice("/people/".length)));  // people.js
  } else if (path === "/search") {
    showSearchFromUrl();  // app.js
  } else {
    showLibrary();
  }
}

// Same-tab links inside the page: the app handles them (a plain click); a middle click or a modified one opens
// a new tab as usual, and the address works there too.
function interceptLinks() {
  document.addEventListener("click", (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    const a = e.target.closest("a[href]");
    if (!a || a.target || a.origin !== location.origin) return;
    const { pathname } = a;
    if (!(pathname === "/" || pathname === "/search" || pathname.startsWith("/photo/")
          || pathname === "/people" || pathname.startsWith("/people/"))) return;
    e.preventDefault();
    if (pathname.startsWith("/photo/")) {
      const grid = a.closest("#library-grid, #results, #answer, #person-photos, #person-faces");
      if (grid) {
        cameFrom = { url: location.pathname + location.search, scrollY: window.scrollY, id: a.dataset.id,
                     ids: [...grid.querySelectorAll("a[data-id]")].map((x) => x.dataset.id) };
      }
    }
    navigate(a.pathname + a.search);
  });
}

// ------------------------------------------------------------------ the library

function showLibrary() {
  showView("library");
  document.title = lib.name ? `${lib.name} · imagent` : "imagent";
  if (!lib.loaded) loadLibrary(0, "reset");
  else restoreScroll();
}

function restoreScroll() {
  if (!cameFrom) return;
  const back = cameFrom;
  cameFrom = null;
  window.scrollTo(0, back.scrollY);
  const tile = back.id && document.querySelector(`#main a[data-id="${CSS.escape(back.id)}"]`);
  if (tile && !tile.closest("[hidden]")) tile.focus({ preventScroll: true });
}

async function loadLibrary(page, how) {
  if (lib.loading) return;
  lib.loading = true;
  $("library-more").disabled = true;
  try {
    const data = await getJson(`/api/library?page=${page}&per_page=${lib.perPage}`);
    lib.total = data.total;
    lib.pages = data.pages;
    lib.name = data.library.name;
    $("gallery-info").textContent = `${data.library.name} · ${plural(data.library.size, "photo")}`;
    $("library-count").textContent = plural(data.total, "photo");
    if (document.body.dataset.view === "library") document.title = `${lib.name} · imagent`;
    if (how === "reset") {
      $("library-grid").replaceChildren();
      lib.first = page;
      lib.last = page - 1;
      fillJump(data.months || []);
    }
    if (how === "prepend") {
      lib.first = page;
      const before = document.documentElement.scrollHeight;
      addPhotos(data.photos, data.days, true);
      window.scrollBy(0, document.documentElement.scrollHeight - before);  // the photos in view stay in view
    } else {
      lib.last = page;
      addPhotos(data.photos, data.days, false);
    }
    lib.loaded = true;
    $("library-empty").hidden = data.total > 0;
    $("library-more").hidden = lib.last >= lib.pages - 1;
    $("library-newer").hidden = lib.first <= 0;
  } catch (e) {
    setStatus(`could not load the library: ${e.message}`, true);
  } finally {
    lib.loading = false;
    $("library-more").disabled = false;
  }
}

// Photos of one page, newest first, into day groups (a day that began on the page before continues).
function addPhotos(photos, days, atTop) {
  const grid = $("library-grid");
  const groups = [];
  for (const p of photos) {
    const day = isoDay(p.taken) || "undated";
    if (!groups.length || groups[groups.length - 1].day !== day) groups.push({ day, photos: [] });
    groups[groups.length - 1].photos.push(p);
  }
  if (atTop) groups.reverse();
  for (const g of groups) {
    let section = grid.querySelector(`section.day[data-day="${g.day}"]`);
    if (!section) {
      section = daySection(g.day, days[g.day], g.photos);
      if (atTop) grid.prepend(section); else grid.append(section);
    }
    const list = section.querySelector("ul");
    const tiles = g.photos.map(tile);
    if (atTop) list.prepend(...tiles); else list.append(...tiles);
  }
}

function daySection(day, count, photos) {
  const places = [...new Set(photos.map((p) => p.place).filter(Boolean).map((p) => p.split(",")[0]))].slice(0, 3);
  const title = day === "undated" ? "No date" : day;
  const head = el("h3", { id: `day-${day}` }, el("span", { text: title }),
    count ? el("span", { class: "muted", text: ` · ${plural(count, "photo")}` }) : null,
    places.length ? el("span", { class: "muted", text: ` · ${places.join(", ")}` }) : null);
  return el("section", { class: "day", "data-day": day, "aria-labelledby": `day-${day}` }, head,
    el("ul", { class: "grid", role: "list" }));
}

function tile(p) {
  const link = el("a", { class: "tile", href: photoUrl(p.id), "data-id": p.id, title: whenWhere(p.taken, p.place) || p.file },
    thumb(p.id, altText(p)));
  return el("li", {}, link);
}

function fillJump(months) {
  const select = $("jump");
  const years = new Map();
  for (const m of months) {
    const y = m.month.slice(0, 4);
    if (!years.has(y)) years.set(y, el("optgroup", { label: y }));
    years.get(y).append(el("option", { value: m.month, text: `${m.month} (${m.count})`, "data-page": String(m.page) }));
  }
  select.replaceChildren(el("option", { value: "", text: "a month…" }), ...years.values());
  select.closest("label").hidden = months.length < 2;
}

async function jumpTo(month) {
  const opt = [...$("jump").options].find((o) => o.value === month);
  if (!opt) return;
  const page = Number(opt.dataset.page);
  if (page < lib.first || page > lib.last) {
    lib.loaded = false;
    const keep = [...$("jump").childNodes];
    await loadLibrary(page, "reset");
    $("jump").replaceChildren(...keep);
  }
  const day = [...document.querySelectorAll("#library-grid section.day")].find((s) => s.dataset.day.startsWith(month));
  if (day) {
    day.scrollIntoView({ block: "start" });
    const first = day.querySelector("a.tile");
    if (first) first.focus({ preventScroll: true });
  }
  $("jump").value = "";
}

function setupLibrary() {
  renderNav();
  $("library-more").addEventListener("click", () => loadLibrary(lib.last + 1, "append"));
  $("library-newer").addEventListener("click", () => loadLibrary(lib.first - 1, "prepend"));
  $("jump").addEventListener("change", () => jumpTo($("jump").value));
  gridKeys($("library-grid"), "a.tile");
  gridKeys($("search-view"), "#results a.open, #answer a.open");
  if ("IntersectionObserver" in window) {  // infinite scroll: the next page loads as the end comes into view
    new IntersectionObserver((entries) => {
      if (entries.some((e) => e.isIntersecting) && !$("library-more").hidden && !$("library-view").hidden) {
        loadLibrary(lib.last + 1, "append");
      }
    }, { rootMargin: "400px" }).observe($("library-more"));
  }
}

// ------------------------------------------------------------------ the photo view

let photoToken = 0;  // the latest photo asked for: an older answer arriving late is dropped

async function openPhoto(id) {
  const token = ++photoToken;
  showView("photo");
  const known = neighbours({ id });  // from the grid it was opened from, before the server answers
  setArrow($("photo-prev"), known.previous);
  setArrow($("photo-next"), known.next);
  let p;
  try {
    p = await getJson(`/api/photos/${enc(id)}`);
  } catch (e) {
    if (token !== photoToken) return;
    currentPhoto = null;
    $("photo-title").textContent = "Photo not found";
    $("photo-caption").textContent = e.message;
    $("photo-details").replaceChildren();
    $("photo-img").removeAttribute("src");
    $("photo-img").alt = "";
    return;
  }
  if (token !== photoToken) return;
  currentPhoto = p;
  document.title = `${p.file} · ${lib.name || "imagent"}`;
  const img = $("photo-img");
  img.alt = altText(p);
  img.src = thumbUrl(p.id, 1600);
  img.onerror = () => { img.onerror = null; img.src = imageUrl(p.id); };  // no thumbnail: the file itself
  $("photo-title").textContent = p.file;
  $("photo-caption").textContent = p.caption || "";
  $("photo-original").href = imageUrl(p.id);
  $("photo-details").replaceChildren(...details(p));
  drawTextBoxes(p);  // text.js: the text read in it, boxed over the photo on hover
  const { previous, next } = neighbours(p);
  setArrow($("photo-prev"), previous);
  setArrow($("photo-next"), next);
  $("photo-title").focus({ preventScroll: true });
  window.scrollTo(0, 0);
}

function details(p) {
  const rows = [];
  const add = (term, ...value) => rows.push(el("dt", { text: term }),
    el("dd", {}, ...value.flatMap((v, i) => (i ? [" ", v] : [v]))));
  if (p.taken) {
    add("Date", el("time", { dateTime: p.taken, text: isoDay(p.taken) }));
    add("Time", el("span", { text: isoMinute(p.taken).slice(11) }));
  } else add("Date", el("span", { class: "muted", text: "unknown" }));
  if (p.place) add("Place", chipLink("place", p.place.split(",")[0].trim(), p.place));
  if (p.latitude !== null && p.latitude !== undefined && p.longitude !== null && p.longitude !== undefined) {
    add("Coordinates", el("span", { text: `${Number(p.latitude).toFixed(5)}, ${Number(p.longitude).toFixed(5)}` }));
  }
  if (p.device) add("Camera", el("span", { text: p.device }));
  if (Array.isArray(p.labels) && p.labels.length) {
    add("Labels", ...p.labels.map((l) => chipLink("label", l.name, typeof l.p === "number" ? `${l.name} (${Math.round(l.p * 100)}%)` : l.name)));
  }
  rows.push(...textRows(p));  // text.js: the text read in the photo
  if (Array.isArray(p.people) && p.people.length) {
    // a named person filters by the name (a chip); someone unnamed opens the group, to be named there
    add("People", ...p.people.map((x) => (x.name ? chipLink("person", x.name, x.name)
      : el("a", { href: `/people/${enc(String(x.id))}`, class: "unnamed", text: "someone unnamed", title: "open this group to name it" }))));
  }
  add("File", el("span", { text: p.file }));
  if (p.folder) add("Folder", el("span", { text: p.folder }));
  if (p.width && p.height) add("Size", el("span", { text: `${p.width} × ${p.height}` }));
  return rows;
}

// A place, label or person shown as a button that filters the library by it (a chip).
function chipLink(kind, value, text) {
  const b = el("button", { type: "button", class: `chip-link ${kind}`, text, title: `only photos with this ${kind}` });
  b.addEventListener("click", () => addChip(kind, value));
  return b;
}

// Previous and next: within the grid the photo was opened from, else the library's order.
function neighbours(p) {
  const at = cameFrom ? cameFrom.ids.indexOf(p.id) : -1;
  if (at >= 0) return { previous: cameFrom.ids[at - 1] || null, next: cameFrom.ids[at + 1] || null };
  return { previous: p.previous, next: p.next };
}

function setArrow(button, id) {
  button.disabled = !id;
  button.dataset.id = id || "";
}

function stepPhoto(which) {
  const id = $(`photo-${which}`).dataset.id;
  if (id) navigate(photoUrl(id), true);  // replaces the address: back still returns to the grid
}

// Back to the grid it was opened from (the browser's back), or to the library when the page opened on the photo.
function closePhoto() {
  if (cameFrom) history.back();
  else navigate("/");
}

function setupPhotoView() {
  $("photo-prev").addEventListener("click", () => stepPhoto("prev"));
  $("photo-next").addEventListener("click", () => stepPhoto("next"));
  $("photo-back").addEventListener("click", closePhoto);
  $("photo-like").addEventListener("click", () => { if (currentPhoto) moreLike(currentPhoto.id); });  // app.js
  document.addEventListener("keydown", (e) => {
    if ($("photo-view").hidden || e.altKey || e.ctrlKey || e.metaKey) return;
    if (e.target.closest("input, textarea, select")) return;
    if (e.key === "ArrowLeft") stepPhoto("prev");
    else if (e.key === "ArrowRight") stepPhoto("next");
    else if (e.key === "Escape") closePhoto();
    else return;
    e.preventDefault();
  });
}

// ------------------------------------------------------------------ filter chips

// The date range, the place box, the chips added from labels and people, and the expression field, as one filter
// expression (the language of imagent search --where).
function buildWhere() {
  const parts = [];
  const from = $("date-from").value.trim(), to = $("date-to").value.trim(), place = $("place").value.trim();
  const expr = $("where").value.trim();
  if (from) parts.push(`time >= ${quote(from)}`);
  if (to) parts.push(`time <= ${quote(to)}`);  // a day (or month, year) is the whole of it
  if (place) parts.push(`place ~ ${quote(place)}`);
  for (const c of extraChips) parts.push(c.expr);
  if (expr) parts.push(parts.length ? `(${expr})` : expr);
  return parts.length ? parts.join(" and ") : null;
}

function chipExpr(kind, value) {
  if (kind === "label") return `label ~ ${quote(value)}`;
  if (kind === "person") return `person = ${quote(value)}`;
  return `place ~ ${quote(value)}`;
}

// A filter from a click on a place, label or person: it joins the words in the search box.
function addChip(kind, value) {
  if (kind === "place") $("place").value = value;
  else if (!extraChips.some((c) => c.kind === kind && c.value === value)) {
    extraChips.push({ kind, value, expr: chipExpr(kind, value), label: `${kind === "label" ? "Label" : "Person"}: ${value}` });
  }
  renderChips();
  $("search-form").requestSubmit();
}

function renderChips() {
  const chips = [];
  const input = (id, label) => {
    const v = $(id).value.trim();
    if (v) chips.push({ label: `${label}: ${v}`, remove: () => { $(id).value = ""; } });
  };
  input("date-from", "From");
  input("date-to", "To");
  input("place", "Place");
  for (const c of extraChips) chips.push({ label: c.label, remove: () => extraChips.splice(extraChips.indexOf(c), 1) });
  input("where", "Where");
  $("chips").replaceChildren(...chips.map((c) => {
    const x = el("button", { type: "button", class: "chip-remove", text: "×", "aria-label": `Remove the filter ${c.label}` });
    x.addEventListener("click", () => {
      c.remove();
      renderChips();
      if (!$("search-view").hidden) $("search-form").requestSubmit();  // the results follow the filters
    });
    return el("li", { class: "chip" }, el("span", { text: c.label }), x);
  }));
}

function clearFilters() {
  for (const id of ["date-from", "date-to", "place", "where"]) $(id).value = "";
  extraChips.length = 0;
  renderChips();
}

function setupChips() {
  for (const id of ["date-from", "date-to", "place", "where"]) $(id).addEventListener("input", renderChips);
}

// The library's name and size in the header, and the places of its latest photos offered in the place box.
async function loadLibraryInfo() {
  try {
    const data = await getJson("/api/library?page=0&per_page=200");
    lib.name = data.library.name;
    $("gallery-info").textContent = `${data.library.name} · ${plural(data.library.size, "photo")}`;
    const names = [...new Set(data.photos.map((p) => p.place).filter(Boolean).map((p) => p.split(",")[0].trim()))];
    $("place-names").replaceChildren(...names.sort().map((n) => el("option", { value: n })));
  } catch (e) {
    setStatus(`could not load the library: ${e.message}`, true);
  }
}
