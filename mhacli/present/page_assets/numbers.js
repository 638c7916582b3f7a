// numbers.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// The page's data, its numbers written as `--format plain` writes them (Python's
// rounding), and its arrays (each set's: one problem's).
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
  return v < 0 && v > -1 && +t === 0 ? t.slice(1) : t; // no "-0.0000"
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
    if (!a.of) continue;
    A[name] = { data: A[a.of].data, shape: a.shape, strides: a.strides, offset: a.offset };
    if (a.neginf) { // another's numbers but some −∞ (where blocked): a copy
      const data = block(A[name], []);
      for (let k = 0; k < data.length; k++) if (a.neginf.charCodeAt(k) === 49) data[k] = -Infinity;
      const strides = [];
      let s = 1;
      for (let d = a.shape.length - 1; d >= 0; d--) { strides[d] = s; s *= a.shape[d]; }
      A[name] = { data: A[a.of].data instanceof Float64Array ? Float64Array.from(data) : data,
        shape: a.shape, strides, offset: 0 };
    }
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
  const a = typeof name === "string" ? A[name] : name, out = [];
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
