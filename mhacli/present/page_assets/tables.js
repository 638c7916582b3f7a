// tables.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// Every table drawn from the data, in order; the heat map and its legend; the
// tiles' and decoding steps' walk.
// ------------------------------------------------------------------ the tables
const place = (p, r, c) => (Array.isArray(p) ? (p[0] === "r" ? r : c) + p[1] : p);
const esc = (s) => String(s).replace(/[&<>"]/g, (ch) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[ch]);
function labels(side) {
  if (typeof side === "number") return Array.from({ length: side }, (_, k) => String(k + 1));
  return typeof side === "string" ? LABELS[side] : side;
}
// the source holding a table's displayed entry (r, c), and the place within it
function locate(t, r, c) {
  let sr = r, sc = c;
  if (t.turned) { sr = c; sc = r; }
  for (const s of t.sources) {
    if (sc < s.cols) return [s, sr, sc];
    sc -= s.cols;
  }
  return [null, 0, 0];
}
function heatRGB(w) {
  const R = D.ramp, x = Math.min(Math.max(w, 0), 1) * (R.length - 1);
  const i = Math.min(Math.floor(x), R.length - 2), f = x - i;
  const rgb = [0, 1, 2].map((k) => Math.round(R[i][k] + (R[i + 1][k] - R[i][k]) * f));
  const light = 0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2] > 140;
  return [rgb, light ? "black" : "white"];
}
// each shade a class (a rule each, made once): a large heat map's entries are not
// each a style attribute for the browser to parse
const hex2 = (x) => (x < 16 ? "0" : "") + x.toString(16);
const SHADES = new Map();
function shadeClass(w) {
  const [rgb, ink] = heatRGB(w);
  const key = hex2(rgb[0]) + hex2(rgb[1]) + hex2(rgb[2]) + (ink === "white" ? "f" : "0");
  let name = SHADES.get(key);
  if (name === undefined) { name = "h" + SHADES.size; SHADES.set(key, name); }
  return name;
}
function shadeRules() {
  let css = "";
  for (const [key, name] of SHADES) {
    css += "td." + name + ",i." + name + "{background:#" + key.slice(0, 6) + ";color:" + (key[6] === "f" ? "#fff" : "#000") + "}";
  }
  const style = document.createElement("style");
  style.textContent = css;
  document.head.appendChild(style);
}
function kvOf(h, set) { use(set); return Math.ceil((h * GROUPS) / HEADS); }

// a source's entry (r, c) as a flat index: base + r·kr + c·kc (its places are linear)
function linear(s) {
  const a = A[s.array];
  let base = a.offset, kr = 0, kc = 0;
  s.index.forEach((p, d) => {
    const st = a.strides[d];
    if (Array.isArray(p)) {
      base += p[1] * st;
      if (p[0] === "r") kr += st; else kc += st;
    } else {
      base += (p < 0 ? p + a.shape[d] : p) * st;
    }
  });
  return { data: a.data, base, kr, kc };
}
function specOf(s, r, c) {
  let out = "";
  for (const p of s.spec) out += typeof p === "string" ? p : place(p, r, c);
  return out;
}
// a column's addresses as the text before its row's place and after it (every place
// but the row's written once), or null where the row's place is not one piece
function specParts(s, sc) {
  const rows = s.spec.filter((p) => Array.isArray(p) && p[0] === "r");
  if (rows.length !== 1) return null;
  const k = s.spec.indexOf(rows[0]);
  const text = (ps) => ps.map((p) => (typeof p === "string" ? p : place(p, 0, sc))).join("");
  return [text(s.spec.slice(0, k)), rows[0][1], text(s.spec.slice(k + 1))];
}

const VERDICTS = { r: "right", w: "wrong", c: "carried", b: "blank" };
function tableHTML(t, ti) {
  use(t.set);
  const rows = labels(t.rows), cols = labels(t.cols);
  const out = ['<table data-t="', ti, '" data-stage="', esc(t.stage), '"'];
  if (t.head !== null && t.head !== undefined) out.push(' data-head="', t.head, '"');
  if (t.part) out.push(' data-part="', t.part, '"');
  out.push(' aria-labelledby="cap', ti, '"><thead><tr><th></th>');
  for (const c of cols) out.push("<th>", esc(c), "</th>");
  out.push("</tr></thead><tbody>");
  const turned = t.turned, whole = t.whole, blocked = t.blocked, ncols = cols.length;
  // each displayed column: its source, its place there, and how to read it
  const colInfo = [];
  for (const s of t.sources) {
    const lin = linear(s);
    for (let sc = 0; sc < s.cols; sc++) colInfo.push({ s, lin, sc, parts: turned ? null : specParts(s, sc) });
  }
  const heat = t.heat, row = heat && D.heat === "row", quiz = t.quiz;
  let first = ' tabindex="0"';
  const values = new Array(ncols);
  for (let r = 0; r < rows.length; r++) {
    let html = "<tr><th>" + esc(rows[r]) + "</th>";
    for (let c = 0; c < ncols; c++) {
      // displayed (r, c) is the source's (r, c), or (c, r) when shown turned
      const info = turned ? colInfo[r] : colInfo[c];
      const lin = info.lin;
      values[c] = lin.data[lin.base + (turned ? c : r) * lin.kr + info.sc * lin.kc];
    }
    let lo = 0, span = 1;
    if (row) {
      const open = values.filter((v, c) => !(blocked && blocked[r * ncols + c] === "1"));
      lo = Math.min(...open); span = Math.max(...open) - lo;
    }
    for (let c = 0; c < ncols; c++) {
      const info = turned ? colInfo[r] : colInfo[c];
      const v = values[c];
      const shut = !!blocked && blocked[r * ncols + c] === "1";
      // (an address has no space or quote: unquoted, as the end tags left out, it is
      // fewer bytes for the browser to read in a large page)
      let td = "<td" + first;
      first = "";
      const parts = info.parts;
      if (parts) td += " data-cell=" + parts[0] + (r + parts[1]) + parts[2];
      else if (info.s.spec.length) td += " data-cell=" + specOf(info.s, turned ? c : r, info.sc);
      if (heat) td += shut ? ' class="blocked"' : " class=" + shadeClass(row ? (span > 0 ? (v - lo) / span : 1) : v);
      if (quiz && v !== -Infinity && !shut) {
        html += td + ' data-verdict="" class="quiz"><input size="7" inputmode="decimal" autocomplete="off" spellcheck="false" aria-label="' +
          esc((t.stage || "") + " " + rows[r] + ", " + cols[c]) + '"><span class="expected"></span>';
      } else if (t.verdicts) {
        const k = r * ncols + c;
        html += td + " data-verdict=" + VERDICTS[t.verdicts[k]] + ">" + esc(t.written[k]);
      } else {
        html += td + ">" + fixed(v, P, whole, false);
      }
    }
    out.push(html);
  }
  out.push("</tbody></table>");
  return out.join("");
}

function draw() {
  const main = document.getElementById("tables");
  const parts = [];
  let stage = null, open = false, heat = false, sized = 0, tall = 0;
  if (D.maps) { parts.push(drawMaps()); heat = true; }
  else D.tables.forEach((t, ti) => {
    if (t.kind === "submission") { // a check page: a section a submission
      if (open) parts.push("</div></section>");
      parts.push('<h2 class="submission">', esc(t.note), "</h2>");
      open = false; stage = null;
      return;
    }
    const name = t.stage || stage;
    if (name !== stage || !open) {
      if (open) parts.push("</div></section>");
      parts.push('<section class="stage" data-section="', esc(name || ""), '"', "", ">");
      sized = parts.length - 2; // its height, guessed below, for while it is not laid out
      tall = 0;
      if (t.walk) parts.push(walkBar(t.walk));
      parts.push('<div class="heads">');
      stage = name; open = true;
    }
    const walk = t.walk ? ' data-walk="' + t.walk + '" data-from="' + t.from + '" data-to="' + t.to + '"' : "";
    const off = t.walk && !(t.from <= 0 && 0 <= t.to) ? " off" : "";
    if (t.note !== undefined) {
      parts.push('<p class="note ', esc(t.kind || ""), off, '"', walk, ">", esc(t.note), "</p>");
      return;
    }
    heat = heat || t.heat;
    const perHead = t.head !== null && t.head !== undefined;
    parts.push('<figure class="tbl', off, '"', walk, perHead ? ' data-ph="' + t.head + '"' + (t.kv ? ' data-kv="1"' : "") : "",
      t.set ? ' data-set="' + t.set + '"' : "", ">");
    parts.push('<figcaption id="cap', ti, '"><b>', esc(t.title), "</b>: ", esc(t.formula),
      ' <span class="shape">(', esc(t.shape), ")</span></figcaption>");
    parts.push('<div class="scroll">', tableHTML(t, ti), "</div></figure>");
    // (a row about 23 px; figures stacked, as a wide table's are: a section off screen
    // is not laid out, and the guess keeps those below the first from being laid out
    // at once)
    tall += 23 * (labels(t.rows).length + 1) + 40;
    parts[sized] = ' style="contain-intrinsic-size:auto ' + tall + 'px"';
  });
  if (open) parts.push("</div></section>");
  const made = document.createElement("template"); // parsed inert, then put in at once
  made.innerHTML = parts.join("");
  main.replaceChildren(made.content);
  if (heat) { shadeRules(); legend(); }
  document.documentElement.dataset.drawn = "1"; // every table is in the document
}

// ------------------------------------------------------------------ walking the steps
const WALKS = {};
for (const t of D.tables) if (t.walk) WALKS[t.walk] = Math.max(WALKS[t.walk] || 0, t.to + 1);
const AT = {};
let lastWalk = Object.keys(WALKS)[0] || null;
function walkBar(name) {
  AT[name] = 0;
  return '<div class="walk" data-walk-bar="' + name + '"><button type="button" data-step="prev" disabled>◀ previous</button>' +
    '<span class="where">step 1 of ' + WALKS[name] + "</span>" +
    '<button type="button" data-step="next"' + (WALKS[name] > 1 ? "" : " disabled") + ">next ▶</button></div>";
}
function setStep(name, k) {
  if (k < 0 || k >= WALKS[name]) return;
  AT[name] = k; lastWalk = name;
  for (const el of document.querySelectorAll('[data-walk="' + name + '"]')) {
    el.classList.toggle("off", !(+el.dataset.from <= k && k <= +el.dataset.to));
  }
  const bar = document.querySelector('[data-walk-bar="' + name + '"]');
  bar.querySelector('[data-step="prev"]').disabled = k === 0;
  bar.querySelector('[data-step="next"]').disabled = k === WALKS[name] - 1;
  bar.querySelector(".where").textContent = "step " + (k + 1) + " of " + WALKS[name];
}
document.addEventListener("click", (ev) => {
  const b = ev.target.closest && ev.target.closest("[data-step]");
  if (!b) return;
  const name = b.closest("[data-walk-bar]").dataset.walkBar;
  setStep(name, AT[name] + (b.dataset.step === "next" ? 1 : -1));
});
document.addEventListener("keydown", (ev) => {
  if (!lastWalk || (ev.key !== "ArrowRight" && ev.key !== "ArrowLeft")) return;
  const el = document.activeElement;
  if (el && el.closest && el.closest("table, input, select, textarea")) return;
  const b = el && el.closest && el.closest("[data-walk-bar]");
  const name = b ? b.dataset.walkBar : lastWalk;
  setStep(name, AT[name] + (ev.key === "ArrowRight" ? 1 : -1));
  ev.preventDefault();
});

function legend() {
  const el = document.getElementById("legend");
  const stops = [];
  for (let k = 0; k <= 10; k++) stops.push("rgb(" + heatRGB(k / 10)[0].join(",") + ")");
  const [lo, hi] = D.heat === "row" ? ["each row's least", "its greatest"] : ["0", "1"];
  const swatch = (w, label) => '<span class="swatch" data-value="' + w + '" style="background:rgb(' +
    heatRGB(w)[0].join(",") + ')"></span><span class="value">' + esc(label) + "</span>";
  el.innerHTML = "heat map: " + swatch(0, lo) + '<span class="ramp" style="background:linear-gradient(to right,' +
    stops.join(",") + ')"></span>' + swatch(1, hi) +
    ' <span class="note">' + (D.heat === "row" ? "each row shaded from its least to its greatest weight" :
      "the weight of each key for the query row") + "; blocked entries unshaded</span>";
  el.hidden = false;
}
