// mha's explorer page: draws every table from the embedded data, writes each number as
// `explain --format plain` does, and on a click (or Enter) runs the entry's recipe as
// `explain --cell` does (mhacli/engine/recipe.py is the other interpreter of the same
// recipes; both do no arithmetic of their own beyond counting places).
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  // the numbers a table reads are its set's (one problem's: a check page of several
  // submissions has one a problem); `use` makes a set the current one
  let P, A, LABELS, RECIPES, HEADS, GROUPS;

  // ------------------------------------------------------------------ numbers as text
  // Python's format(v, ".Pf"): the exact binary value rounded half to even. toFixed is
  // exact too but breaks ties away from zero, so a possible tie is decided exactly.
  const VIEW = new DataView(new ArrayBuffer(8));
  function exactFixed(v, p) {
    VIEW.setFloat64(0, v);
    const hi = VIEW.getUint32(0), lo = VIEW.getUint32(4);
    const neg = hi >>> 31, expBits = (hi >>> 20) & 0x7ff;
    let mant = (BigInt(hi & 0xfffff) << 32n) | BigInt(lo);
    let e;
    if (expBits === 0) { e = -1074; } else { mant |= 1n << 52n; e = expBits - 1075; }
    let digits;
    if (e >= 0) {
      digits = (mant << BigInt(e)) * 10n ** BigInt(p);
    } else {
      const num = mant * 10n ** BigInt(p), den = 1n << BigInt(-e);
      let q = num / den;
      const r2 = (num % den) * 2n;
      if (r2 > den || (r2 === den && (q & 1n) === 1n)) q += 1n;
      digits = q;
    }
    let s = digits.toString();
    if (p > 0) {
      s = s.padStart(p + 1, "0");
      s = s.slice(0, s.length - p) + "." + s.slice(s.length - p);
    }
    return (neg ? "-" : "") + s;
  }
  const TENS = [];
  for (let k = 0; k <= 20; k++) TENS.push(Math.pow(10, k));
  function pyFixed(v, p) {
    const a = Math.abs(v);
    if (a < 1e21) {
      const y = a * (p <= 20 ? TENS[p] : Math.pow(10, p));
      if (y < 4e15 && Math.abs(y - Math.floor(y) - 0.5) > 1e-6) return v.toFixed(p);
    }
    return exactFixed(v, p);
  }
  // numbers.fixed: a fraction as written, whole numbers plain, never "-0.0000"
  function fixed(v, p, whole, unicode) {
    if (typeof v === "string") return v;
    if (Number.isNaN(v)) return "nan";
    if (!Number.isFinite(v)) return (v < 0 ? "-" : "") + (unicode ? "∞" : "inf");
    if (whole || v === 0) return String(Math.trunc(v) || 0);
    const t = pyFixed(v, p);
    return v < 0 && /^-[0.]*$/.test(t) ? t.slice(1) : t; // no "-0.0000"
  }
  function textOf(v) { // recipe.text_of
    if (typeof v === "string") return v;
    return fixed(v, P, Number.isInteger(v) && Math.abs(v) < 1e12, true);
  }
  function factorOf(v) {
    const t = textOf(v);
    return t.startsWith("-") || t.startsWith("\u2212") || t.includes("/") ? "(" + t + ")" : t;
  }

  // ------------------------------------------------------------------ the arrays
  function float64s(text) { // base64 of little-endian float64s
    const bytes = atob(text), n = bytes.length, buf = new Uint8Array(n);
    for (let i = 0; i < n; i++) buf[i] = bytes.charCodeAt(i);
    const view = new DataView(buf.buffer), out = new Float64Array(n / 8);
    for (let i = 0; i < out.length; i++) out[i] = view.getFloat64(8 * i, true);
    return out;
  }
  function arrays(all) {
    const A = {};
    for (const [name, a] of Object.entries(all)) {
      if (a.of) continue;
      const data = a.f64 !== undefined ? float64s(a.f64) : a.data;
      if (a.special) {
        a.special.k.forEach((k, n) => {
          const w = a.special.v[n];
          data[k] = w === "nan" ? NaN : w === "inf" ? Infinity : -Infinity;
        });
    }
      const strides = [];
      let s = 1;
      for (let d = a.shape.length - 1; d >= 0; d--) { strides[d] = s; s *= a.shape[d]; }
      A[name] = { data, shape: a.shape, strides, offset: 0 };
    }
    for (const [name, a] of Object.entries(all)) {
      if (a.of) A[name] = { data: A[a.of].data, shape: a.shape, strides: a.strides, offset: a.offset };
    }
    return A;
  }
  const SETS = D.sets.map((d) => ({ A: arrays(d.arrays), d }));
  function use(k) {
    const s = SETS[k || 0];
    A = s.A; P = s.d.precision; LABELS = s.d.labels; RECIPES = s.d.recipes;
    HEADS = s.d.heads; GROUPS = s.d.groups;
  }
  use(0);
  function flat(arr, idx) {
    let k = arr.offset;
    for (let d = 0; d < idx.length; d++) {
      let i = idx[d];
      if (i < 0) i += arr.shape[d];
      k += i * arr.strides[d];
    }
    return k;
  }
  function at(name, idx) { const a = A[name]; return a.data[flat(a, idx)]; }
  function block(name, idx) { // a[idx] whole: the remaining axes in C order
    const a = A[name], out = [];
    const rest = a.shape.slice(idx.length), rs = a.strides.slice(idx.length);
    const base = flat(a, idx);
    (function walk(d, k) {
      if (d === rest.length) { out.push(a.data[k]); return; }
      for (let i = 0; i < rest[d]; i++) walk(d + 1, k + i * rs[d]);
    })(0, base);
    return out;
  }
  function column(name, idx) { // a[(*lead, :, k)]
    const a = A[name], lead = idx.slice(0, -1), k = idx[idx.length - 1], d = lead.length;
    const out = [];
    for (let i = 0; i < a.shape[d]; i++) out.push(a.data[flat(a, lead.concat([i, k]))]);
    return out;
  }

  // ------------------------------------------------------------------ recipes
  const SUB = "₀₁₂₃₄₅₆₇₈₉", SUP = "⁰¹²³⁴⁵⁶⁷⁸⁹";
  const digitsIn = (s, set) => String(s).replace(/[0-9]/g, (c) => set[+c]);
  function text(v) {
    if (v === null || v === undefined) return "";
    return typeof v === "string" ? v : String(v);
  }
  function truthy(v) {
    if (Array.isArray(v)) return v.length > 0;
    return !(v === null || v === undefined || v === false || v === 0 || v === "");
  }
  function pyIndex(v, k) { return v[k < 0 ? v.length + k : k]; }
  function run(node, env) {
    let items = [], index = 0;
    function ev(n) {
      if (!Array.isArray(n)) return n;
      const op = n[0], a = n.slice(1);
      switch (op) {
        case "v": return env[a[0]];
        case "it": return items[a[0]];
        case "k": return index;
        case "+": return ev(a[0]) + ev(a[1]);
        case "-": return ev(a[0]) - ev(a[1]);
        case "*": return ev(a[0]) * ev(a[1]);
        case "//": return Math.floor(ev(a[0]) / ev(a[1]));
        case "%": { const x = ev(a[0]), y = ev(a[1]); return ((x % y) + y) % y; }
        case "abs": return Math.abs(ev(a[0]));
        case "min": return Math.min(ev(a[0]), ev(a[1]));
        case "max": return Math.max(ev(a[0]), ev(a[1]));
        case "==": return ev(a[0]) === ev(a[1]);
        case "!=": return ev(a[0]) !== ev(a[1]);
        case "<": return ev(a[0]) < ev(a[1]);
        case "<=": return ev(a[0]) <= ev(a[1]);
        case ">": return ev(a[0]) > ev(a[1]);
        case ">=": return ev(a[0]) >= ev(a[1]);
        case "and": return truthy(ev(a[0])) && truthy(ev(a[1]));
        case "or": return truthy(ev(a[0])) || truthy(ev(a[1]));
        case "not": return !truthy(ev(a[0]));
        case "if": return truthy(ev(a[0])) ? ev(a[1]) : ev(a[2]);
        case "pick": return ev(a[1 + ev(a[0])]);
        case "cat": return a.map((p) => text(ev(p))).join("");
        case "sub": return digitsIn(ev(a[0]), SUB);
        case "sup": return "⁽" + digitsIn(ev(a[0]), SUP) + "⁾";
        case "str": return text(ev(a[0]));
        case "lines": {
          const out = [];
          for (const p of a) {
            const v = ev(p);
            if (Array.isArray(v)) out.push(...v);
            else if (v !== null && v !== undefined) out.push(text(v));
          }
          return out;
        }
        case "label": {
          const k = ev(a[1]);
          return a[0] ? LABELS[a[0]][k] : String(k + 1);
        }
        case "at": return at(a[0], a.slice(1).map(ev));
        case "row": return block(a[0], a.slice(1).map(ev));
        case "col": return column(a[0], a.slice(1).map(ev));
        case "slice": return ev(a[0]).slice(ev(a[1]), ev(a[2]));
        case "range": { const out = []; for (let i = ev(a[0]); i < ev(a[1]); i++) out.push(i); return out; }
        case "len": return ev(a[0]).length;
        case "item": return pyIndex(ev(a[0]), ev(a[1]));
        case "num": return textOf(ev(a[0]));
        case "factor": return factorOf(ev(a[0]));
        case "isinf": { const v = ev(a[0]); return typeof v === "number" && !Number.isFinite(v) && !Number.isNaN(v); }
        case "isneginf": { const v = ev(a[0]); return typeof v === "number" && v === -Infinity; }
        case "each": {
          const [sep, most, body] = a;
          const vectors = a.slice(3).map(ev);
          const count = Math.min(...vectors.map((v) => v.length));
          const saved = [items, index];
          let texts = [];
          for (let k = 0; k < count; k++) {
            items = vectors.map((v) => v[k]); index = k;
            const t = ev(body);
            if (t !== null && t !== undefined) texts.push(text(t));
          }
          [items, index] = saved;
          if (most && texts.length > most) {
            const hidden = texts.length - most, half = Math.floor(most / 2);
            texts = texts.slice(0, half).concat(["… (" + hidden + " more terms) …"], texts.slice(texts.length - half));
          }
          return texts.join(sep);
        }
        default: throw new Error("unknown op " + op);
      }
    }
    return ev(node);
  }

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
      css += "td." + name + "{background:#" + key.slice(0, 6) + ";color:" + (key[6] === "f" ? "#fff" : "#000") + "}";
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
    // each displayed column: its source, its place there, and how to read it
    const colInfo = [];
    for (const s of t.sources) {
      const lin = linear(s);
      for (let sc = 0; sc < s.cols; sc++) colInfo.push({ s, lin, sc });
    }
    const turned = t.turned, whole = t.whole, blocked = t.blocked, ncols = cols.length;
    let first = true;
    const values = new Array(ncols);
    for (let r = 0; r < rows.length; r++) {
      out.push("<tr><th>", esc(rows[r]), "</th>");
      for (let c = 0; c < ncols; c++) {
        // displayed (r, c) is the source's (r, c), or (c, r) when shown turned
        const info = turned ? colInfo[r] : colInfo[c];
        const lin = info.lin;
        values[c] = lin.data[lin.base + (turned ? c : r) * lin.kr + info.sc * lin.kc];
      }
      let lo = 0, span = 1;
      if (t.heat && D.heat === "row") {
        const open = values.filter((v, c) => !(blocked && blocked[r * ncols + c] === "1"));
        lo = Math.min(...open); span = Math.max(...open) - lo;
      }
      for (let c = 0; c < ncols; c++) {
        const info = turned ? colInfo[r] : colInfo[c];
        const v = values[c];
        out.push("<td");
        if (first) { out.push(' tabindex="0"'); first = false; }
        // (an address has no space or quote: unquoted, as the end tags left out, it is
        // fewer bytes for the browser to read in a large page)
        if (info.s.spec.length) out.push(" data-cell=", specOf(info.s, turned ? c : r, info.sc));
        if (t.heat) {
          if (blocked && blocked[r * ncols + c] === "1") out.push(' class="blocked"');
          else out.push(" class=", shadeClass(D.heat === "row" ? (span > 0 ? (v - lo) / span : 1) : v));
        }
        if (t.quiz && v !== -Infinity && !(blocked && blocked[r * ncols + c] === "1")) {
          out.push(' data-verdict="" class="quiz"><input size="7" inputmode="decimal" autocomplete="off" spellcheck="false" aria-label="',
            esc((t.stage || "") + " " + labels(t.rows)[r] + ", " + cols[c]), '"><span class="expected"></span>');
        } else if (t.verdicts) {
          const k = r * ncols + c;
          out.push(" data-verdict=", VERDICTS[t.verdicts[k]], ">", esc(t.written[k]));
        } else {
          out.push(">", fixed(v, P, whole, false));
        }
      }
    }
    out.push("</tbody></table>");
    return out.join("");
  }

  function draw() {
    const main = document.getElementById("tables");
    const parts = [];
    let stage = null, open = false, heat = false;
    D.tables.forEach((t, ti) => {
      if (t.kind === "submission") { // a check page: a section a submission
        if (open) parts.push("</div></section>");
        parts.push('<h2 class="submission">', esc(t.note), "</h2>");
        open = false; stage = null;
        return;
      }
      const name = t.stage || stage;
      if (name !== stage || !open) {
        if (open) parts.push("</div></section>");
        parts.push('<section class="stage" data-section="', esc(name || ""), '">');
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

  // ------------------------------------------------------------------ an entry's arithmetic
  let marked = [];
  function clearMarks() { for (const el of marked) el.classList.remove("mk", "sel"); marked = []; }
  function markTables(stage, head, rows, cols) {
    const sel = 'table[data-stage="' + stage + '"]' + (head === null || head === undefined ? ":not([data-head])" : '[data-head="' + head + '"]');
    for (const table of document.querySelectorAll(sel)) {
      const t = D.tables[+table.dataset.t];
      if (t.walk) continue;
      const body = table.tBodies[0];
      if (t.part) { // the softmax's parts: the row's max, the key's exp, the row's sum
        const width = body.rows.length ? body.rows[0].cells.length - 1 : 0;
        if (!cols.size) continue;
        const keep = new Set([0, width - 1, ...[...cols].map((j) => j + 1)]);
        for (const r of rows) {
          const tr = body.rows[r];
          if (!tr) continue;
          for (const c of keep) { const td = tr.cells[c + 1]; if (td) { td.classList.add("mk"); marked.push(td); } }
        }
        continue;
      }
      for (let r = 0; r < body.rows.length; r++) {
        const tr = body.rows[r];
        for (let c = 1; c < tr.cells.length; c++) {
          const sr = t.turned ? c - 1 : r, sc = t.turned ? r : c - 1;
          const hit = rows.size && cols.size ? rows.has(sr) && cols.has(sc) : rows.has(sr) || cols.has(sc);
          if (hit) { tr.cells[c].classList.add("mk"); marked.push(tr.cells[c]); }
        }
      }
    }
  }
  // the entry's recipe run at its place: its title, lines and marks
  function arithmetic(td) {
    const table = td.closest("table");
    if (!table || !td.dataset.cell) return null;
    const t = D.tables[+table.dataset.t];
    use(t.set);
    const r = td.parentNode.rowIndex - 1, c = td.cellIndex - 1;
    const [s, sr, sc] = locate(t, r, c);
    if (!s || !s.recipe) return null;
    if (t.verdicts) { // a check page: what the grader says of the entry
      const k = r * (labels(t.cols).length) + c, v = VERDICTS[t.verdicts[k]];
      if (v === "wrong" || v === "carried") return { title: td.dataset.cell + ": " + v, lines: t.notes[k], marks: [] };
      if (v === "blank") return { title: td.dataset.cell + ": blank", lines: ["left blank: work not done"], marks: [] };
    }
    const recipe = RECIPES[s.recipe];
    const env = {};
    for (const [k, p] of s.env) env[k] = p === null ? null : place(p, sr, sc);
    const marks = recipe.marks.map(([stage, h, rs, cs]) => [stage, run(h, env),
      new Set((rs || []).map((x) => run(x, env))), new Set((cs || []).map((x) => run(x, env)))]);
    return { title: run(recipe.title, env), lines: run(recipe.lines, env), marks };
  }
  // a quiz's entry not yet right: what it is made of (outlined), not its answer
  function operands(td, made) {
    const out = ["made from the entries outlined:"];
    for (const [stage, h, rows, cols] of made.marks.slice(1)) {
      const parts = [];
      if (rows.size) parts.push("row" + (rows.size > 1 ? "s " : " ") + [...rows].map((x) => x + 1).join(", "));
      if (cols.size) parts.push("column" + (cols.size > 1 ? "s " : " ") + [...cols].map((x) => x + 1).join(", "));
      out.push("  " + stage + (h === null || h === undefined ? "" : " · head " + h) + (parts.length ? ": " + parts.join(", ") : ""));
    }
    return out;
  }
  function show(td) {
    const made = arithmetic(td);
    if (!made) return;
    if (td.classList.contains("quiz") && td.dataset.verdict !== "right") made.lines = operands(td, made);
    document.getElementById("arithmetic-title").textContent = made.title;
    document.getElementById("arithmetic").textContent = made.lines.join("\n");
    clearMarks();
    for (const [stage, h, rows, cols] of made.marks) markTables(stage, h, rows, cols);
    td.classList.add("sel"); marked.push(td);
  }

  // ------------------------------------------------------------------ pointer and keys
  function labelsOf(td) {
    const table = td.closest("table");
    return [td.parentNode.cells[0], table.tHead.rows[0].cells[td.cellIndex]];
  }
  function focusCell(td) {
    const table = td.closest("table");
    const old = table.querySelector('td[tabindex="0"]');
    if (old && old !== td) old.setAttribute("tabindex", "-1");
    td.setAttribute("tabindex", "0");
    td.focus();
  }
  document.addEventListener("mouseover", (ev) => {
    const td = ev.target.closest && ev.target.closest("#tables td");
    if (td) for (const th of labelsOf(td)) th && th.classList.add("hl");
  });
  document.addEventListener("mouseout", (ev) => {
    const td = ev.target.closest && ev.target.closest("#tables td");
    if (td) for (const th of labelsOf(td)) th && th.classList.remove("hl");
  });
  document.addEventListener("click", (ev) => {
    const td = ev.target.closest && ev.target.closest("#tables td");
    if (!td) return;
    if (ev.target.tagName !== "INPUT") focusCell(td); // (a quiz's blank keeps the focus)
    show(td);
  });
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT") { // a quiz's blank: Enter judges it (as leaving it does)
      if (ev.key === "Enter") judgeInput(ev.target);
      return;
    }
    const td = ev.target.closest && ev.target.closest("#tables td");
    if (!td) return;
    const tr = td.parentNode, body = tr.parentNode;
    let next = null;
    if (ev.key === "Enter" || ev.key === " ") { show(td); ev.preventDefault(); return; }
    if (ev.key === "ArrowRight") next = tr.cells[td.cellIndex + 1];
    else if (ev.key === "ArrowLeft") next = td.cellIndex > 1 ? tr.cells[td.cellIndex - 1] : null;
    else if (ev.key === "ArrowDown") next = body.rows[tr.sectionRowIndex + 1] && body.rows[tr.sectionRowIndex + 1].cells[td.cellIndex];
    else if (ev.key === "ArrowUp") next = tr.sectionRowIndex > 0 ? body.rows[tr.sectionRowIndex - 1].cells[td.cellIndex] : null;
    else if (ev.key === "Home") next = tr.cells[1];
    else if (ev.key === "End") next = tr.cells[tr.cells.length - 1];
    else return;
    ev.preventDefault();
    if (next) focusCell(next);
  });

  // ------------------------------------------------------------------ the quiz
  // check's rule for one written number (mhacli/claims.py, grading/records.py): written
  // with k decimals it claims the value within half a unit of its last decimal; a whole
  // number (2, 2., 2e0, 12e3) or a fraction (1/3) is an exact claim; −∞ for a blocked
  // score. The carried-error rule needs the reader's earlier numbers carried through the
  // stages, which the page does not compute: an entry is judged against the true value.
  const NUMBER = /^[+-]?(?:(?:0|[1-9]\d*)(?:\.(\d*))?|\.(\d+))(?:[eE]([+-]?\d+))?$/;
  const FRACTION = /^[+-]?(?:0|[1-9]\d*)\/[1-9]\d*$/;
  function claim(written) {
    const text = written.trim().replace(/\u2212/g, "-");
    const low = text.toLowerCase();
    if (["", "_", "?", "~", "null"].includes(low)) return { blank: true };
    if (["-inf", "-∞", "-infinity"].includes(low)) return { value: -Infinity, half: 0 };
    if (FRACTION.test(text)) {
      const [a, b] = text.split("/");
      return { value: Number(a) / Number(b), half: 0, exact: true, text };
    }
    const m = NUMBER.exec(text);
    if (!m) return null;
    const value = Number(text);
    if (!Number.isFinite(value)) return null;
    const decimals = (m[1] || m[2] || "").length, exp = m[3] ? Number(m[3]) : 0;
    if (Number.isInteger(value) && (m[3] !== undefined || (!m[1] && m[2] === undefined))) {
      // a whole number as one: exact (its digits, for an exact comparison)
      return { value, half: 0, exact: true, text: Number.isSafeInteger(value) ? String(value) : "" };
    }
    const places = decimals - exp;
    return { value, half: 0.5 * Math.pow(10, -places), places };
  }
  function fraction(text) { // "p/q" (or a whole number) as BigInts, or null
    const m = /^([+-]?\d+)(?:\/(\d+))?$/.exec(text);
    return m ? [BigInt(m[1]), BigInt(m[2] || "1")] : null;
  }
  // ``written`` against the true value ``e`` (exactly ``exact``, "p/q", where known),
  // ``full`` the true value as check words it
  function judge(written, e, exact, full) {
    const c = claim(written);
    if (c === null) return { verdict: "", note: "not a number: write 0.33, 1/3, 2e-3 or -inf" };
    if (c.blank) return { verdict: "", note: "" };
    let right;
    const mine = c.exact && exact ? fraction(c.text) : null;
    const truth = exact ? fraction(exact) : null;
    if (mine && truth) right = mine[0] * truth[1] === truth[0] * mine[1];
    else if (!Number.isFinite(e) || !Number.isFinite(c.value)) right = c.value === e;
    else right = Math.abs(c.value - e) <= c.half + 1e-12 * Math.max(1, Math.abs(e));
    if (right) return { verdict: "right", note: "" };
    const rounded = c.places === undefined || c.places > 17 || !Number.isFinite(e) ? null :
      e === 0 ? (0).toFixed(c.places) : fixed(e, c.places, false, true);
    if (truth && rounded !== null && Number(rounded) === Number(truth[0]) / Number(truth[1])) {
      full = truth[1] === 1n ? rounded : exact; // the same number: -1.5000 (-3/2)
    }
    let text = rounded === null || rounded === written.trim() || rounded === full ? full : rounded + " (" + full + ")";
    text = written.includes("\u2212") ? text.replace(/-/g, "\u2212") : text.replace(/\u2212/g, "-");
    return { verdict: "wrong", note: "expected " + text };
  }
  function judgeInput(input) {
    const td = input.closest("td"), table = td.closest("table");
    const t = D.tables[+table.dataset.t];
    use(t.set);
    const r = td.parentNode.rowIndex - 1, c = td.cellIndex - 1;
    const [s, sr, sc] = locate(t, r, c);
    const e = at(s.array, s.index.map((p) => place(p, sr, sc)));
    const k = r * labels(t.cols).length + c;
    const made = judge(input.value, e, t.exact ? t.exact[k] : null, t.expected[k]);
    td.dataset.verdict = made.verdict;
    td.querySelector(".expected").textContent = made.note;
  }
  document.addEventListener("change", (ev) => {
    if (ev.target.tagName === "INPUT" && ev.target.closest("#tables")) judgeInput(ev.target);
  });

  // ------------------------------------------------------------------ heads
  function chooseHead(value) {
    for (const fig of document.querySelectorAll("figure[data-ph]")) {
      const h = +fig.dataset.ph;
      fig.hidden = !(value === "all" || (fig.dataset.kv ? h === kvOf(+value, +(fig.dataset.set || 0)) : h === +value));
    }
  }
  const select = document.querySelector('select[name="head"]');
  if (select) select.addEventListener("change", () => chooseHead(select.value));

  draw();
  if (select && select.value !== "all") chooseHead(select.value);
  // for tests: every entry's arithmetic at once, by its address
  function everyEntry() {
    const out = {};
    for (const td of document.querySelectorAll("#tables td[data-cell]")) {
      const made = arithmetic(td);
      if (made) out[td.dataset.cell] = [made.title, made.lines];
    }
    return out;
  }
  window.mha = { fixed, textOf, factorOf, run, everyEntry, data: D };
})();
