// recipes.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// An entry's recipe run at its place, as mhacli/engine/recipe.py runs it for --cell.
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
// a number of an exact stage ("5/2") as a float
function num(v) {
  if (typeof v !== "string") return v;
  const k = v.indexOf("/");
  return k < 0 ? Number(v) : Number(v.slice(0, k)) / Number(v.slice(k + 1));
}
// where a value made again reads its numbers (the quiz's: a reader's own), else the page's
let READ = null;
function readRow(name, idx) {
  const out = [], count = A[name].shape[idx.length];
  for (let k = 0; k < count; k++) out.push(READ(name, idx.concat([k])));
  return out;
}
function readCol(name, idx) {
  const lead = idx.slice(0, -1), k = idx[idx.length - 1], out = [];
  for (let i = 0; i < A[name].shape[lead.length]; i++) out.push(READ(name, lead.concat([i, k])));
  return out;
}
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
      case "at": return READ ? READ(a[0], a.slice(1).map(ev)) : at(a[0], a.slice(1).map(ev));
      case "row": return READ ? readRow(a[0], a.slice(1).map(ev)) : block(a[0], a.slice(1).map(ev));
      case "col": return READ ? readCol(a[0], a.slice(1).map(ev)) : column(a[0], a.slice(1).map(ev));
      // values made again (floats): recipe.py's Run alike
      case "f+": return num(ev(a[0])) + num(ev(a[1]));
      case "f-": return num(ev(a[0])) - num(ev(a[1]));
      case "f*": return num(ev(a[0])) * num(ev(a[1]));
      case "f/": return num(ev(a[0])) / num(ev(a[1]));
      case "exp": return Math.exp(num(ev(a[0])));
      case "tanh": return Math.tanh(num(ev(a[0])));
      case "sqrt": return Math.sqrt(num(ev(a[0])));
      case "inf": return ev(a[0]) < 0 ? -Infinity : Infinity;
      case "nan": return NaN;
      case "fsum": { let t = 0; for (const x of ev(a[0])) t += num(x); return t; }
      case "fmax": { let t = -Infinity; for (const x of ev(a[0])) { const y = num(x); if (y > t || Number.isNaN(y)) t = y; } return t; }
      case "fdot": {
        const v = ev(a[0]), w = ev(a[1]);
        let t = 0;
        for (let k = 0; k < Math.min(v.length, w.length); k++) t += num(v[k]) * num(w[k]);
        return t;
      }
      case "fmap": {
        const vectors = a.slice(1).map(ev), count = Math.min(...vectors.map((v) => v.length));
        const saved = [items, index], out = [];
        for (let k = 0; k < count; k++) { items = vectors.map((v) => v[k]); index = k; out.push(ev(a[0])); }
        [items, index] = saved;
        return out;
      }
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
