// imagent web app: the text read in a photo (the index's OCR pass), in the photo view.
//
// The photo view (library.js) asks for two things, both from the photo's JSON (/api/photos/<id>: `text_lines`,
// each {text, box: four [x, y] corners as fractions of the upright photo, confidence}):
// - textRows(p): the "Text" row of the details, one line of the photo's text each (nothing for a photo without);
// - drawTextBoxes(p): each line's box drawn over the photo, shown while the pointer is on the photo, and a line's
//   own box picked out while the pointer (or the keyboard focus) is on that line of the details.

const SVG_NS = "http://www.w3.org/2000/svg";

function textRows(p) {
  const lines = Array.isArray(p.text_lines) ? p.text_lines.filter((l) => l && typeof l.text === "string" && l.text.trim()) : [];
  if (!lines.length) return [];
  const list = el("ol", { class: "photo-text", "aria-label": "text read in the photo" },
    ...lines.map((l, n) => {
      const item = el("li", { text: l.text, tabIndex: 0, "data-line": String(n),
        title: typeof l.confidence === "number" ? `read with ${Math.round(l.confidence * 100)}% confidence` : "" });
      const pick = (on) => document.querySelectorAll(`#photo-text-boxes polygon[data-line="${n}"]`)
        .forEach((b) => b.classList.toggle("picked", on));
      item.addEventListener("mouseenter", () => pick(true));
      item.addEventListener("mouseleave", () => pick(false));
      item.addEventListener("focus", () => pick(true));
      item.addEventListener("blur", () => pick(false));
      return item;
    }));
  return [el("dt", { text: "Text" }), el("dd", {}, list)];
}

// The overlay sits on the image's own rectangle (the <img> letterboxes it: object-fit contain).
function placeTextBoxes() {
  const img = $("photo-img");
  const svg = document.getElementById("photo-text-boxes");
  if (!svg || !img.naturalWidth || !img.naturalHeight) return;
  const w = img.clientWidth, h = img.clientHeight;
  const scale = Math.min(w / img.naturalWidth, h / img.naturalHeight);
  const shownW = img.naturalWidth * scale, shownH = img.naturalHeight * scale;
  Object.assign(svg.style, { left: `${img.offsetLeft + (w - shownW) / 2}px`, top: `${img.offsetTop + (h - shownH) / 2}px`,
    width: `${shownW}px`, height: `${shownH}px` });
}

function drawTextBoxes(p) {
  const img = $("photo-img");
  const figure = img.parentElement;
  const old = document.getElementById("photo-text-boxes");
  if (old) old.remove();
  figure.classList.remove("has-text");
  const lines = Array.isArray(p.text_lines) ? p.text_lines : [];
  const boxes = lines.map((l, n) => [l, n]).filter(([l]) => Array.isArray(l.box) && l.box.length >= 3);
  if (!boxes.length) return;
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.id = "photo-text-boxes";
  svg.setAttribute("viewBox", "0 0 1 1");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  for (const [l, n] of boxes) {
    const poly = document.createElementNS(SVG_NS, "polygon");
    poly.setAttribute("points", l.box.map(([x, y]) => `${Number(x)},${Number(y)}`).join(" "));
    poly.setAttribute("data-line", String(n));
    poly.setAttribute("vector-effect", "non-scaling-stroke");
    const title = document.createElementNS(SVG_NS, "title");
    title.textContent = l.text;
    poly.append(title);
    svg.append(poly);
  }
  figure.classList.add("has-text");
  figure.append(svg);
  placeTextBoxes();
  img.addEventListener("load", placeTextBoxes);
}

window.addEventListener("resize", placeTextBoxes);
