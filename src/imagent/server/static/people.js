// imagent web UI: the People page (the people JSON API, imagent/server/people.py).
// /people: the groups of faces the index found, each a card with its largest faces, its name (named or renamed in
// place), how many photos it is in, "Show photos" (the search with the chip person = 'NAME') and "Merge into…";
// groups seen rarely last, in the API's order. An index without face data says how to get it.
// /people/<group>: one group: its name, its faces (remove one that is not a face, split off one that is someone
// else), its photos in the library's grid.
// Everything from the server is inserted as text (textContent), never as HTML.
"use strict";

const peopleState = { groups: [], summary: null, loaded: false, token: 0 };  // the list as last loaded
const personState = { group: null, page: 0, pages: 0, token: 0 };            // the group at /people/<id>
let peopleFormSeq = 0;  // unique ids for the labels of the forms on screen

const personUrl = (id) => `/people/${enc(String(id))}`;
const personLabel = (g) => g.name || `Unnamed (group ${g.id})`;
// What a button says, and for a screen reader whose it is (its visible text stays the start of its name).
const aside = (text) => el("span", { class: "visually-hidden", text });

function countText(g) {
  if (!g.faces) return "no photos now";
  return g.faces === g.photos ? plural(g.photos, "photo") : `${plural(g.photos, "photo")} · ${plural(g.faces, "face")}`;
}

async function postJson(url, body) {
  const resp = await fetch(url, { method: "POST", headers: { "Content-Type": "application/json" },
                                  body: JSON.stringify(body || {}) });
  const data = await resp.json().catch(() => null);
  if (!resp.ok) throw new Error(errorText(data, resp.status));
  return data;
}

// A face crop (GET /api/faces/<id>/thumbnail); one that cannot be cut (its photo changed or is gone) says so.
function faceImage(url, alt) {
  const img = el("img", { class: "face", alt, loading: "lazy", decoding: "async" });
  img.src = `${url}?size=240`;  // sharp on a card at twice its CSS size
  img.addEventListener("error", () => img.replaceWith(el("span", { class: "face missing", text: "not shown", title: "its photo changed or is gone: run imagent index" })));
  return img;
}

// ------------------------------------------------------------------ the list

async function loadPeople() {
  const token = ++peopleState.token;
  const data = await getJson("/api/people?thumbs=4");
  if (token !== peopleState.token) return false;
  peopleState.groups = data.people;
  peopleState.summary = data.faces;
  peopleState.loaded = true;
  return true;
}

async function showPeople(focusId = null) {
  showView("people");
  document.title = `People · ${lib.name || "imagent"}`;
  try {
    if (!(await loadPeople())) return;
  } catch (e) {
    setStatus(`could not load the people: ${e.message}`, true);
    return;
  }
  renderPeople();
  const card = focusId !== null && document.querySelector(`#people-view li[data-person="${focusId}"] a.faces`);
  if (card) card.focus();
}

function renderPeople() {
  const { groups, summary } = peopleState;
  $("people-empty").hidden = summary !== null;
  const none = summary !== null && groups.length === 0;
  $("people-none").hidden = !none;
  if (none) {
    $("people-none").textContent = `imagent looked at ${plural(summary.photos_scanned, "photo")} and found no faces `
      + "in them. Photos added to the folder are looked at the next time you run imagent index.";
  }
  const big = groups.filter((g) => !g.tiny);
  const tiny = groups.filter((g) => g.tiny);
  $("people-grid").replaceChildren(...big.map(personCard));
  $("people-grid").hidden = !big.length;
  $("people-tiny").replaceChildren(...tiny.map(personCard));
  $("people-tiny-box").hidden = !tiny.length;
  renderPeopleCount();
}

function renderPeopleCount() {
  const { groups, summary } = peopleState;
  const named = groups.filter((g) => g.name).length;
  $("people-count").textContent = summary
    ? `${plural(groups.length, "group")} · ${named} named · ${plural(summary.faces, "face")} in ${plural(summary.photos_scanned, "photo")} looked at`
    : "";
}

function personCard(g) {
  const label = personLabel(g);
  const faces = g.thumbnails.length ? g.thumbnails.map((url) => faceImage(url, ""))
    : [el("span", { class: "face missing", text: "no photos now" })];
  const open = el("a", { class: `faces n${Math.min(faces.length, 4)}`, href: personUrl(g.id),
                         "aria-label": `${label}: ${countText(g)}`, title: `open ${label}` }, ...faces);
  const card = el("li", { class: g.name ? "person named" : "person", "data-person": String(g.id) },
    open,
    nameForm(g, (done) => {
      const at = peopleState.groups.findIndex((x) => x.id === g.id);
      if (at >= 0) peopleState.groups[at] = done;
      renderPeopleCount();
      const fresh = personCard(done);
      card.replaceWith(fresh);
      fresh.querySelector("input.name-input").focus();
    }),
    el("p", { class: "count muted", text: countText(g) }),
    personActions(g, async (done) => {
      try { await loadPeople(); } catch (e) { setStatus(`could not load the people: ${e.message}`, true); return; }
      renderPeople();
      const target = document.querySelector(`#people-view li[data-person="${done.id}"] a.faces`);
      if (target) target.focus();
    }));
  return card;
}

// The name of a group, in place: type it and press Enter (or Save); an empty name takes it off.
function nameForm(g, onDone) {
  const id = `person-name-${++peopleFormSeq}`;
  const label = personLabel(g);
  const input = el("input", { id, type: "text", class: "name-input", value: g.name || "", placeholder: "Add a name",
                              maxLength: 100, autocomplete: "off", spellcheck: false });
  const save = el("button", { type: "submit" }, "Save", aside(` the name of ${label}`));
  const form = el("form", { class: "name-form" },
    el("label", { htmlFor: id, class: "visually-hidden", text: `Name of ${label}` }), input, save);
  input.addEventListener("keydown", (e) => {
    if (e.key === "Escape") { input.value = g.name || ""; input.removeAttribute("aria-invalid"); }
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const name = input.value.trim();
    if (name === (g.name || "")) { setStatus(name ? `${name}: the name is unchanged` : "type a name first"); return; }
    save.disabled = true;
    try {
      const done = await postJson(`/api/people/${g.id}/name`, { name });
      input.removeAttribute("aria-invalid");
      if (!done.name) setStatus(`the name ${done.previous} is taken off`);
      else setStatus(done.previous ? `${done.previous} is now ${done.name}` : `named ${done.name}`);
      delete done.previous;
      onDone(done);
    } catch (err) {
      input.setAttribute("aria-invalid", "true");
      setStatus(`could not name ${label}: ${err.message}`, true);
      input.focus();
    } finally {
      save.disabled = false;
    }
  });
  return form;
}

// "Show photos" (a named person: the search with the chip person = 'NAME') and "Merge into…" (this group's faces
// join another group; the form opens in place with the other groups to choose from).
function personActions(g, onMerged) {
  const label = personLabel(g);
  const box = el("div", { class: "card-actions" });
  if (g.name) {
    const show = el("button", { type: "button", class: "show-photos" }, "Show photos", aside(` of ${g.name}`));
    show.addEventListener("click", () => showPhotosOf(g.name));
    box.append(show);
  }
  const id = `person-merge-${++peopleFormSeq}`;
  const select = el("select", { id });
  const merge = el("button", { type: "submit", text: "Merge" });
  const cancel = el("button", { type: "button", text: "Cancel" });
  const form = el("form", { class: "merge-form" },
    el("label", { htmlFor: id, text: "Merge into" }), select, merge, cancel);
  form.hidden = true;
  const toggle = el("button", { type: "button", class: "merge-open", "aria-expanded": "false" },
    "Merge into…", aside(` another person: ${label} is them`));
  const close = () => { form.hidden = true; toggle.hidden = false; toggle.setAttribute("aria-expanded", "false"); toggle.focus(); };
  toggle.addEventListener("click", async () => {
    if (!peopleState.loaded) {
      try { await loadPeople(); } catch (e) { setStatus(`could not load the people: ${e.message}`, true); return; }
    }
    const others = peopleState.groups.filter((o) => o.id !== g.id && o.faces);
    if (!others.length) { setStatus("there is no other group to merge into"); return; }
    select.replaceChildren(...others.map((o) => el("option", { value: String(o.id), text: `${personLabel(o)} (${countText(o)})` })));
    form.hidden = false;
    toggle.hidden = true;
    toggle.setAttribute("aria-expanded", "true");
    select.focus();
  });
  cancel.addEventListener("click", close);
  form.addEventListener("keydown", (e) => { if (e.key === "Escape") { e.preventDefault(); close(); } });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    merge.disabled = true;
    try {
      const done = await postJson("/api/people/merge", { into: Number(select.value), ids: [g.id] });
      setStatus(`${label} merged into ${personLabel(done)}: ${plural(done.faces, "face")} in ${plural(done.photos, "photo")}`);
      await onMerged(done);
    } catch (err) {
      setStatus(`could not merge: ${err.message}`, true);
    } finally {
      merge.disabled = false;
    }
  });
  box.append(toggle, form);
  return box;
}

// The photos of a named person: the search with only the chip person = 'NAME' (its address: /search?person=NAME).
function showPhotosOf(name) {
  clearFilters();  // library.js
  $("query").value = "";
  addChip("person", name);
}

// ------------------------------------------------------------------ one group

async function showPerson(raw) {
  showView("person");
  const token = ++personState.token;
  const id = /^\d{1,12}$/.test(raw) ? Number(raw) : null;
  let g;
  try {
    if (id === null) throw new Error(`${raw.slice(0, 60)} is not a group number`);
    g = await getJson(`/api/people/${id}`);
  } catch (e) {
    if (token !== personState.token) return;
    personState.group = null;
    document.title = `People · ${lib.name || "imagent"}`;
    $("person-title").textContent = "No such person";
    $("person-count").textContent = e.message;
    for (const box of ["person-tools", "person-faces", "person-photos"]) $(box).replaceChildren();
    $("person-faces-box").hidden = true;
    $("person-more").hidden = true;
    return;
  }
  if (token !== personState.token) return;
  personState.group = g;
  renderPersonHead(g);
  $("person-faces-box").hidden = !g.face_list.length;
  $("person-faces").replaceChildren(...g.face_list.map((f, i) => faceItem(g, f, i)));
  $("person-photos").replaceChildren();
  $("person-more").hidden = true;
  if (g.photos) await loadPersonPhotos(0, token);
  if (token !== personState.token) return;
  if (cameFrom && cameFrom.url === location.pathname + location.search) restoreScroll();
  else { $("person-title").focus({ preventScroll: true }); window.scrollTo(0, 0); }
}

function renderPersonHead(g) {
  document.title = `${personLabel(g)} · People · ${lib.name || "imagent"}`;
  $("person-title").textContent = personLabel(g);
  $("person-count").textContent = countText(g);
  $("person-tools").replaceChildren(
    nameForm(g, (done) => {
      personState.group = { ...personState.group, ...done };
      renderPersonHead(personState.group);
      $("person-tools").querySelector("input.name-input").focus();
    }),
    personActions(g, (done) => navigate(personUrl(done.id), true)));  // this group is gone: show the one it joined
}

function faceItem(g, f, i) {
  const label = personLabel(g);
  const which = `face ${i + 1} of ${label}`;
  const link = el("a", { class: "face-photo", href: photoUrl(f.photo), "data-id": f.photo, title: "open its photo" },
    faceImage(f.thumbnail, which));
  const split = el("button", { type: "button", class: "split" }, g.name ? `Not ${g.name}` : "Not this person",
    aside(`: ${which} is someone else, move it to a group of its own`));
  split.addEventListener("click", async () => {
    try {
      const done = await postJson(`/api/faces/${f.id}/split`, {});
      setStatus(`the face is now in a group of its own (group ${done.to}): open it from People to name or merge it`);
      await afterFaceChange(g);
    } catch (e) { setStatus(`could not move the face: ${e.message}`, true); }
  });
  const remove = el("button", { type: "button", class: "remove" }, "Not a face", aside(`: delete ${which}`));
  remove.addEventListener("click", async () => {
    if (!window.confirm("Delete this face? It is not a face, or nobody to keep: it is deleted and not found again.")) return;
    try {
      await postJson(`/api/faces/${f.id}/remove`, {});
      setStatus("the face is deleted");
      await afterFaceChange(g);
    } catch (e) { setStatus(`could not delete the face: ${e.message}`, true); }
  });
  return el("li", { class: "face-item", "data-face": String(f.id) }, link, el("div", { class: "face-actions" }, split, remove));
}

// After a face left the group: the group again, or People when it has no face left.
async function afterFaceChange(g) {
  const left = g.face_list.length - 1;
  if (left <= 0 && !g.name) navigate("/people", true);
  else await showPerson(String(g.id));
}

async function loadPersonPhotos(page, token = personState.token) {
  const g = personState.group;
  if (!g) return;
  $("person-more").disabled = true;
  try {
    const data = await getJson(`/api/library?where=${enc(`person = ${g.id}`)}&page=${page}&per_page=60`);
    if (token !== personState.token) return;
    $("person-photos").append(...data.photos.map(tile));  // library.js: the library's tiles
    personState.page = page;
    personState.pages = data.pages;
    $("person-more").hidden = page >= data.pages - 1;
  } catch (e) {
    setStatus(`could not load the photos: ${e.message}`, true);
  } finally {
    $("person-more").disabled = false;
  }
}

$("person-more").addEventListener("click", () => loadPersonPhotos(personState.page + 1));
gridKeys($("person-photos"), "a.tile");
