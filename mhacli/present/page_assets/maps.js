// maps.js: part of the explorer page's script (page.py joins the parts,
// in order, inside one function).
// `explain --all-heads`: each head a small heat map (as the terminal's: pooled, each
// row shaded from 0 to its largest weight, the tokens on its edges, its numbers under
// it); a click on a map, or Enter on it, opens that head's weights table below the
// layer's maps (the others of that layer closed).
// ------------------------------------------------------------------ the maps
function mapHTML(t, ti) {
  const m = t.map;
  const out = ['<figure class="map" data-map="', ti, '"', t.set ? ' data-set="' + t.set + '"' : "",
    ' data-head="', t.head, '" tabindex="0" role="button" aria-expanded="false" aria-controls="open', ti,
    '" aria-label="', esc(t.layer + ", head " + t.head + ": open its weights"), '"><figcaption>head ',
    t.head, '</figcaption><div class="grid" style="grid-template-columns:auto repeat(', m.cols.length,
    ',var(--cell))">'];
  m.grid.forEach((row, r) => {
    out.push('<span class="ql">', esc(m.rows[r]), "</span>");
    for (let c = 0; c < row.length; c++) {
      out.push('<i class="', shadeClass(row[c]), '" title="', esc(m.rows[r] + " → " + m.cols[c]), '"></i>');
    }
  });
  out.push("<span></span>");
  for (const c of m.cols) out.push('<span class="kl">', esc(c), "</span>");
  out.push('</div><p class="nums">', m.numbers.map(esc).join(" · "), "</p></figure>");
  return out.join("");
}
function drawMaps() {
  const parts = [];
  let layer = null, opened = [];
  const close = () => {
    if (layer !== null) parts.push('</div><div class="opened">', opened.join(""), "</div></section>");
  };
  D.tables.forEach((t, ti) => {
    if (!t.map) return;
    if (t.layer !== layer) {
      close();
      parts.push('<section class="layer" data-layer="', esc(t.layer), '"><h2>', esc(t.layer),
        '</h2><div class="maps">');
      layer = t.layer; opened = [];
    }
    parts.push(mapHTML(t, ti));
    opened.push('<figure class="tbl off" id="open' + ti + '" data-ph="' + t.head + '"' +
      (t.set ? ' data-set="' + t.set + '"' : "") + '><figcaption id="cap' + ti + '"><b>' +
      esc(t.layer + " · " + t.title) + "</b>: " + esc(t.formula) + ' <span class="shape">(' +
      esc(t.shape) + ')</span></figcaption><div class="scroll">' + tableHTML(t, ti) + "</div></figure>");
  });
  close();
  return parts.join("");
}
function openMap(fig) {
  const section = fig.closest("section");
  const want = "open" + fig.dataset.map;
  for (const f of section.querySelectorAll(".opened > figure")) f.classList.toggle("off", f.id !== want);
  for (const f of section.querySelectorAll("figure.map")) f.setAttribute("aria-expanded", String(f === fig));
  document.getElementById(want).scrollIntoView({ block: "nearest" });
}
document.addEventListener("click", (ev) => {
  const fig = ev.target.closest && ev.target.closest("figure.map");
  if (fig) openMap(fig);
});
document.addEventListener("keydown", (ev) => {
  if ((ev.key === "Enter" || ev.key === " ") && ev.target.matches && ev.target.matches("figure.map")) {
    openMap(ev.target);
    ev.preventDefault();
  }
});
