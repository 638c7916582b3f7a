// events.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// What a click, a key or a choice does: an entry's arithmetic (or what check or the
// quiz says of it), the entries it is made of, the keys, the quiz's judging, the heads.
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
    if (ev.key === "Enter") judgeQuiz();
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

document.addEventListener("change", (ev) => {
  if (ev.target.tagName === "INPUT" && ev.target.closest("#tables")) judgeQuiz();
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
