// quiz.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// `--quiz`: each blank judged as `check` judges it (mhacli/grading/judge.py), the quiz's
// stages in the engine's order. A number is judged at the precision written
// (mhacli/claims.py, grading/records.py): written with k decimals it claims the value
// within half a unit of its last decimal; a whole number (2, 2., 2e0, 12e3) or a fraction
// (1/3) is an exact claim; −∞ for a blocked score. One not right for the true value is
// "carried" when it is right for what the reader's own earlier entries give (their
// numbers as written, and with the truth for those right: the nearest value between the
// two), give or take what half a unit of each earlier number not right moves it: that
// value is made again by the recipes' values (Recipe.value), the engine's operations,
// from the reader's numbers, as check makes it by the engine.
// ------------------------------------------------------------------ the quiz
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
const FLOAT_SLACK = 1e-12, CARRY_CELLS = 4000; // grading/records.py, judge.py
// right for the value e (exactly `exact`, "p/q", where known), give or take `allowance`
function rightFor(c, e, exact, allowance) {
  if (Number.isNaN(e)) return true;
  if (!Number.isFinite(e) || !Number.isFinite(c.value)) return c.value === e;
  const mine = c.exact && exact ? fraction(c.text) : null, truth = exact ? fraction(exact) : null;
  if (mine && truth) return mine[0] * truth[1] === truth[0] * mine[1];
  return Math.abs(c.value - e) <= c.half + FLOAT_SLACK * Math.max(1, Math.abs(e)) + allowance;
}
// the true value as check words it: at the precision written, and in full
function expectedText(c, written, e, exact, full) {
  const truth = exact ? fraction(exact) : null;
  const rounded = c.places === undefined || c.places > 17 || !Number.isFinite(e) ? null :
    e === 0 ? (0).toFixed(c.places) : fixed(e, c.places, false, true);
  if (truth && rounded !== null && Number(rounded) === Number(truth[0]) / Number(truth[1])) {
    full = truth[1] === 1n ? rounded : exact; // the same number: -1.5000 (-3/2)
  }
  const text = rounded === null || rounded === written.trim() || rounded === full ? full : rounded + " (" + full + ")";
  return written.includes("\u2212") ? text.replace(/-/g, "\u2212") : text.replace(/\u2212/g, "-");
}

// ------------------------------------------------------------------ the reader's numbers
// A world: the stages the reader gave (their numbers typed, and the world their blanks
// are made in: the one before them, as check fills a blank), the stages after the first
// of them made again from those by the recipes' values, and the page's own numbers for
// the rest (the inputs, and the stages before the quiz's first).
const ORDER = new Map((D.quiz ? D.quiz.order : []).map((name, k) => [name, k]));
const NOT_SAID = new Error("a stage between says no value");
function world(given) { return { given, memo: new Map() }; }
function given(w, stage, typed) { return world(new Map(w.given).set(stage, { typed, base: w })); }
let FIRST = Infinity; // the quiz's first stage, in the engine's order
const rank = (stage) => (ORDER.has(stage) ? ORDER.get(stage) : -1); // (an input: first)
for (const t of D.tables) if (t.quiz && ORDER.has(t.stage)) FIRST = Math.min(FIRST, ORDER.get(t.stage));
function valueIn(w, name, idx) {
  const g = w.given.get(name);
  if (g) {
    const v = g.typed.get(idx.join(","));
    return v !== undefined ? v : valueIn(g.base, name, idx); // a blank: made from before it
  }
  const k = ORDER.get(name);
  if (k === undefined || k < FIRST) return num(at(name, idx));
  const key = name + "|" + idx.join(",");
  let v = w.memo.get(key);
  if (v !== undefined) return v;
  const recipe = RECIPES[name];
  if (!recipe || recipe.value === undefined) throw NOT_SAID;
  const env = A[name].shape.length === 3 ? { h: idx[0] + 1, i: idx[1], j: idx[2] } : { h: null, i: idx[0], j: idx[1] };
  const saved = READ;
  READ = (n, at) => valueIn(w, n, at);
  try { v = num(run(recipe.value, env)); } finally { READ = saved; }
  w.memo.set(key, v);
  return v;
}
// how far the entry may move when each earlier number not right moves by half a unit
// of its last digit, each moved alone (judge.py's _carried_rounding)
function rounding(tru, halves, stage, idx) {
  const base = valueIn(tru, stage, idx);
  let total = 0;
  for (const { stage: s, key, h } of halves) {
    const g = tru.given.get(s), typed = new Map(g.typed);
    typed.set(key, typed.get(key) + h);
    const d = Math.abs(valueIn(world(new Map(tru.given).set(s, { typed, base: g.base })), stage, idx) - base);
    if (Number.isFinite(d)) total += d;
  }
  return total * 1.01;
}
// right for some value between what the reader's own numbers give and what they give
// with the truth for those right (judge.py's _judge_between)?
function follows(c, x, own, tru, halves) {
  const one = valueIn(own, x.stage, x.idx), other = valueIn(tru, x.stage, x.idx);
  const allowance = D.quiz.carry && halves.length && halves.length <= CARRY_CELLS ?
    rounding(tru, halves, x.stage, x.idx) : 0;
  const lo = Number.isNaN(one) ? other : Number.isNaN(other) ? one : Math.min(one, other);
  const hi = Number.isNaN(one) ? other : Number.isNaN(other) ? one : Math.max(one, other);
  const near = !Number.isFinite(c.value) ? lo : Number.isFinite(lo) && Number.isFinite(hi) ?
    Math.min(Math.max(c.value, lo), hi) : one;
  return rightFor(c, near, null, allowance);
}
// the quiz's blanks, a list a stage, in the engine's order
function quizEntries() {
  const byStage = new Map();
  for (const td of document.querySelectorAll("#tables td.quiz")) {
    const t = D.tables[+td.closest("table").dataset.t];
    use(t.set);
    const r = td.parentNode.rowIndex - 1, c = td.cellIndex - 1;
    const [s, sr, sc] = locate(t, r, c);
    const idx = s.index.map((p) => place(p, sr, sc)), k = r * labels(t.cols).length + c;
    if (!byStage.has(t.stage)) byStage.set(t.stage, []);
    byStage.get(t.stage).push({ td, stage: t.stage, idx, key: idx.join(","), e: num(at(s.array, idx)),
      exact: t.exact ? t.exact[k] : null, full: t.expected[k] });
  }
  return [...byStage.keys()].sort((a, b) => rank(a) - rank(b)).map((name) => byStage.get(name));
}
// every blank judged again (an earlier entry changed may change a later one's verdict)
function judgeQuiz() {
  let own = world(new Map()), tru = world(new Map());
  const halves = []; // each earlier number not right: its stage, place and half unit
  let earlier = false;
  for (const entries of quizEntries()) {
    const mine = new Map(), theirs = new Map(), slips = []; // (its halves: once it is judged)
    for (const x of entries) {
      const written = x.td.querySelector("input").value, c = claim(written);
      let verdict = "", note = "";
      if (c === null) note = "not a number: write 0.33, 1/3, 2e-3 or -inf";
      else if (!c.blank) {
        const right = rightFor(c, x.e, x.exact, 0);
        let carried = false;
        if (!right && earlier) {
          try { carried = follows(c, x, own, tru, halves); } catch (err) { if (err !== NOT_SAID) throw err; }
        }
        verdict = right ? "right" : carried ? "carried" : "wrong";
        note = right ? "" : carried ? "carried: from your earlier entries" :
          "expected " + expectedText(c, written, x.e, x.exact, x.full);
        mine.set(x.key, c.value);
        theirs.set(x.key, right ? x.e : c.value);
        if (!right && c.half > 0) slips.push({ stage: x.stage, key: x.key, h: c.half });
      }
      x.td.dataset.verdict = verdict;
      x.td.querySelector(".expected").textContent = note;
    }
    halves.push(...slips);
    own = given(own, entries[0].stage, mine);
    tru = given(tru, entries[0].stage, theirs);
    earlier = true;
  }
}
