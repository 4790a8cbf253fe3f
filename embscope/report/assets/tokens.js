/* embscope report, part 2 of 4 (under-trained token table and token map). The renderer joins the parts, in order, inside one
   function scope: no globals but window.embscopeDisplayToken and window.embscopeFmt. Plain DOM, canvas and SVG; no
   third-party code, no network. Untrusted text (tokens, terms, names) is only ever written with
   textContent, after displayToken(). */
  /* ---- under-trained token table ---- */
  /* header labels and one-line tooltips: DATA.help (embscope.report.labels, from docs/schema.md's text) */
  var TOP_LABELS = { in_norm: "‖e‖ in", out_norm: "‖w‖ out", verify_max_prob: "max p prompted", flag_reason: "why" };
  /* rows shown before "show more" (the table holds up to 300 per category) */
  var TOP_PAGE = 25;
  /* decimals per column: scores and norms to 3, similarities (which sit near 0 or 1) to 4 */
  var TOP_DIGITS = { undertrained_score: 3, in_norm: 3, out_norm: 3, magikarp_sim: 3, knot: 4, isolation: 4,
    knn_sim_k: 4, verify_max_prob: 4 };
  function topTable() {
    var tok = DATA.tokens || {}, top = tok.top, table = document.getElementById("top-table");
    if (!table) return;
    if (!top || top.reason) {
      var bar = document.getElementById("top-search").parentNode; bar.hidden = true;
      noData(table.parentNode, (top && top.reason) || tok.reason || "no scores"); return;
    }
    var cols = top.columns.filter(function (c) { return c !== "flagged"; });
    var hasFlag = top.columns.indexOf("flagged") >= 0;
    var tr = el("tr");
    if (hasFlag) tr.appendChild(el("th", null, ""));
    var help = (DATA.help || {}).tokens || {};
    cols.forEach(function (c) {
      var th = el("th", (typeof (top.rows[0] || {})[c] === "number" && c !== "token_id" ? "n " : "") + "c-" + c,
                  TOP_LABELS[c] || (help[c] || {}).label || c);
      th.title = (help[c] || {}).tip || "";
      tr.appendChild(th);
    });
    table.tHead.appendChild(tr);
    var body = table.tBodies[0];
    top.rows.forEach(function (r) {
      var row = el("tr");
      var search = [displayToken(r.token), String(r.token), String(r.token_id), r.category || "", r.script || ""].join("\u0001").toLowerCase();
      row.setAttribute("data-search", search);
      if (hasFlag) {
        var f = el("td"); f.setAttribute("data-v", r.flagged ? "1" : "0");
        if (r.flagged) { var d = el("span", "flag"); d.title = "flagged"; f.appendChild(d); }
        row.appendChild(f);
      }
      cols.forEach(function (c) {
        var td = el("td", "c-" + c);
        if (c === "token") { td.appendChild(el("span", "tok", displayToken(r.token))); td.setAttribute("data-v", displayToken(r.token)); }
        else if (c === "neighbors") {
          td.classList.add("nbcell");
          (r.neighbors || []).forEach(function (nb) {
            var s = el("span", "nb", displayToken(nb[1]));
            if (nb[2] !== null && nb[2] !== undefined) s.appendChild(el("small", null, " " + Number(nb[2]).toFixed(2)));
            s.title = displayToken(nb[1]) + "  (id " + nb[0] + ")";
            td.appendChild(s);
          });
        } else {
          td.textContent = c === "token_id" ? String(r[c]) : (TOP_DIGITS[c] !== undefined ? fmtFixed(r[c], TOP_DIGITS[c]) : fmt(r[c]));
          if (typeof r[c] === "number") { td.classList.add("n"); td.setAttribute("data-v", String(r[c])); }
        }
        row.appendChild(td);
      });
      body.appendChild(row);
    });
    makeSortable(table);
    var input = document.getElementById("top-search"), count = document.getElementById("top-count");
    /* Category filter: normal tokens by default; special, padding and the other categories are
       reported apart (they are not trained like text) and shown on request. */
    var catSel = document.getElementById("top-category"), cats = top.categories || [];
    if (catSel) {
      cats.forEach(function (c) {
        var o = el("option", null, c === "normal" ? "normal tokens" : displayToken(c) + " rows"); o.value = "=" + c; catSel.appendChild(o);
      });
      if (cats.length > 1) {
        var oth = el("option", null, "all but normal"); oth.value = "!normal"; catSel.appendChild(oth);
        var all = el("option", null, "all categories"); all.value = "*"; catSel.appendChild(all);
      }
      catSel.value = top.default === "normal" && cats.indexOf("normal") >= 0 ? "=normal" : (cats.length > 1 ? "*" : "=" + cats[0]);
    }
    function catOk(r) {
      var v = catSel ? catSel.value : "*", c = r.category || "unknown";
      if (v === "*") return true;
      if (v === "!normal") return c !== "normal";
      return c === v.slice(1);
    }
    Array.prototype.forEach.call(body.rows, function (row, k) { row.__rec = top.rows[k]; });
    var limit = TOP_PAGE, more = el("button", "more");
    more.type = "button"; more.id = "top-more";
    table.parentNode.parentNode.insertBefore(more, table.parentNode.nextSibling);
    function update() {
      var q = input.value.trim().toLowerCase(), match = 0, total = 0;
      Array.prototype.forEach.call(body.rows, function (row) {
        var inCat = catOk(row.__rec);
        if (inCat) total++;
        var ok = inCat && (!q || row.getAttribute("data-search").indexOf(q) >= 0);
        row.hidden = !ok || match >= limit; if (ok) match++;
      });
      var shown = Math.min(match, limit);
      table.classList.toggle("one-category", !!catSel && catSel.value.charAt(0) === "=");  /* its column says nothing then */
      var what = catSel && catSel.value === "=normal" ? "normal tokens" : "rows";
      count.textContent = shown + " of " + total + " " + what + " shown (highest score first" + (q ? ", " + match + " match" : "") + ")";
      more.hidden = match <= TOP_PAGE;
      more.textContent = match > limit ? "Show all " + match + " rows" : "Show the first " + TOP_PAGE;
    }
    more.addEventListener("click", function () { limit = limit > TOP_PAGE ? TOP_PAGE : Infinity; update(); });
    table.__repage = update;
    input.addEventListener("input", update);
    if (catSel) catSel.addEventListener("change", update);
    update();
  }

  /* ---- token map (canvas scatter, sampled) ---- */
  function tokenMap() {
    var canvas = document.getElementById("map-canvas");
    if (!canvas) return;
    var m = (DATA.tokens || {}).map;
    if (!m || m.reason) {
      noData(document.getElementById("map-panel"), (m && m.reason) || "no map");
      var hint = document.getElementById("atlas-hint"); if (hint) hint.hidden = true;
      return;
    }
    var n = m.x.length, sel = document.getElementById("map-colour"), tip = document.getElementById("map-tip");
    var note = document.getElementById("map-note"), legend = document.getElementById("map-legend");
    note.textContent = m.n_shown < m.n_total
      ? "Showing " + m.n_shown.toLocaleString("en-US") + " of " + m.n_total.toLocaleString("en-US") + " tokens: every flagged row (" + (m.n_flagged || 0).toLocaleString("en-US") + ") plus a uniform random sample of the rest. Hover a point to see its token."
      : "All " + m.n_total.toLocaleString("en-US") + " tokens. Hover a point to see its token.";
    [["score", "under-trained score"], ["cat", "category"], ["script", "script"], ["flag", "flagged"]].forEach(function (o) {
      if (m[o[0]]) { var opt = el("option", null, o[1]); opt.value = o[0]; sel.appendChild(opt); }
    });
    var minX = Infinity, maxX = -Infinity, minY = Infinity, maxY = -Infinity;
    for (var i = 0; i < n; i++) {
      if (m.x[i] < minX) minX = m.x[i]; if (m.x[i] > maxX) maxX = m.x[i];
      if (m.y[i] < minY) minY = m.y[i]; if (m.y[i] > maxY) maxY = m.y[i];
    }
    var sLo = Infinity, sHi = -Infinity, anyFlag = !!m.flag && m.flag.some(function (f) { return f; });
    if (m.score) {  /* colour range: 1st..99th percentile, so a few extreme scores do not flatten the rest */
      var sorted = m.score.filter(function (v) { return v !== null; }).sort(function (a, b) { return a - b; });
      if (sorted.length) { sLo = sorted[Math.floor(sorted.length * 0.01)]; sHi = sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * 0.99))]; }
    }
    var px = new Float32Array(n), py = new Float32Array(n), W = 0, H = 0, PAD = 14, grid = null, CELL = 12;
    /* zoom and pan: screen = (base position − centre) × zoom + centre + shift; search: ringed matches */
    var view = { zoom: 1, dx: 0, dy: 0 }, found = [], search = document.getElementById("map-search");
    var foundNote = document.getElementById("map-found"), lower = m.tok.map(function (t) { return displayToken(t).toLowerCase(); });
    function colourOf(i, mode) {
      if (mode === "score") { var v = m.score[i]; return v === null ? "#d0d5dd" : ramp(VIRIDIS, (v - sLo) / ((sHi - sLo) || 1)); }
      if (mode === "cat") return CAT_COLOURS[m.cat_levels[m.cat[i]]] || "#98a2b3";
      if (mode === "script") return m.script[i] < 10 ? PALETTE[m.script[i]] : "#c0c6d0";
      if (mode === "flag") return m.flag[i] ? "#c2410c" : "#b8c4d6";
      return "#2f6fde";
    }
    function drawLegend(mode) {
      legend.textContent = "";
      function item(colour, label) {
        var s = el("span"); var sw = el("span", "sw"); sw.style.background = colour; s.appendChild(sw);
        s.appendChild(document.createTextNode(label)); legend.appendChild(s);
      }
      if (mode === "score") {
        legend.appendChild(el("span", null, fmt(sLo)));
        var r = el("span", "ramp"); r.style.background = "linear-gradient(to right," + VIRIDIS.join(",") + ")";
        legend.appendChild(r); legend.appendChild(el("span", null, fmt(sHi) + "+  (1st–99th percentile; higher = more likely under-trained" + (anyFlag ? "; flagged points outlined in orange" : "") + ")"));
      } else if (mode === "cat") m.cat_levels.forEach(function (c) { item(CAT_COLOURS[c] || "#98a2b3", displayToken(c)); });
      else if (mode === "script") {
        m.script_levels.slice(0, 10).forEach(function (c, k) { item(PALETTE[k], displayToken(c)); });
        if (m.script_levels.length > 10) item("#c0c6d0", "other (" + (m.script_levels.length - 10) + ")");
      } else if (mode === "flag") { item("#c2410c", "flagged"); item("#b8c4d6", "not flagged"); }
    }
    function draw() {
      var dpr = window.devicePixelRatio || 1, rect = canvas.getBoundingClientRect();
      W = rect.width; H = rect.height;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      var ctx = canvas.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, W, H);
      var sx = (W - 2 * PAD) / ((maxX - minX) || 1), sy = (H - 2 * PAD) / ((maxY - minY) || 1);
      grid = {};
      for (var i = 0; i < n; i++) {
        px[i] = (PAD + (m.x[i] - minX) * sx - W / 2) * view.zoom + W / 2 + view.dx;
        py[i] = (H - PAD - (m.y[i] - minY) * sy - H / 2) * view.zoom + H / 2 + view.dy;
        var key = Math.floor(px[i] / CELL) + "," + Math.floor(py[i] / CELL);
        (grid[key] || (grid[key] = [])).push(i);
      }
      var mode = sel.value, order = [];
      for (i = 0; i < n; i++) order.push(i);
      if (m.score) order.sort(function (a, b) { return (m.score[a] || 0) - (m.score[b] || 0); });
      if (m.flag) order.sort(function (a, b) { return m.flag[a] - m.flag[b]; });
      ctx.globalAlpha = 0.75;
      order.forEach(function (i) {
        var flagged = m.flag && m.flag[i];
        ctx.fillStyle = colourOf(i, mode);
        ctx.beginPath(); ctx.arc(px[i], py[i], flagged ? 2.6 : 1.6, 0, 6.2832); ctx.fill();
        if (flagged && mode !== "flag") { ctx.globalAlpha = 1; ctx.strokeStyle = "#c2410c"; ctx.lineWidth = 1; ctx.stroke(); ctx.globalAlpha = 0.75; }
      });
      ctx.globalAlpha = 1;
      found.forEach(function (i) {
        ctx.strokeStyle = "#111827"; ctx.lineWidth = 2;
        ctx.beginPath(); ctx.arc(px[i], py[i], 6, 0, 6.2832); ctx.stroke();
      });
      drawLegend(mode);
    }
    function zoomAt(x, y, f) {
      var z = Math.max(1, Math.min(view.zoom * f, 400)); f = z / view.zoom;
      view.dx = (view.dx - (x - W / 2)) * f + (x - W / 2); view.dy = (view.dy - (y - H / 2)) * f + (y - H / 2);
      view.zoom = z; if (z === 1) { view.dx = 0; view.dy = 0; }
      draw();
    }
    canvas.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var rect = canvas.getBoundingClientRect();
      zoomAt(ev.clientX - rect.left, ev.clientY - rect.top, ev.deltaY < 0 ? 1.25 : 0.8);
    }, { passive: false });
    var drag = null;
    canvas.addEventListener("mousedown", function (ev) { drag = [ev.clientX, ev.clientY]; });
    window.addEventListener("mouseup", function () { drag = null; });
    window.addEventListener("mousemove", function (ev) {
      if (!drag || view.zoom === 1) return;
      view.dx += ev.clientX - drag[0]; view.dy += ev.clientY - drag[1]; drag = [ev.clientX, ev.clientY]; draw();
    });
    document.getElementById("map-reset").addEventListener("click", function () { view = { zoom: 1, dx: 0, dy: 0 }; draw(); });
    function find() {
      var q = search.value.trim().toLowerCase();
      found = [];
      if (q) for (var i = 0; i < n; i++) if (lower[i].indexOf(q) >= 0 || String(m.id[i]) === q) found.push(i);
      foundNote.textContent = q ? (found.length ? found.length.toLocaleString("en-US") + " on the map match" + (found.length > 1 ? "" : "es") + " (ringed)" : "no token on the map matches (the map shows a sample: every flagged token and part of the rest)") : "";
      draw();
    }
    function zoomToFound() {
      if (!found.length) return;
      view = { zoom: 1, dx: 0, dy: 0 }; draw();
      var x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
      found.forEach(function (i) { x0 = Math.min(x0, px[i]); x1 = Math.max(x1, px[i]); y0 = Math.min(y0, py[i]); y1 = Math.max(y1, py[i]); });
      var z = Math.max(1, Math.min(W / Math.max(x1 - x0 + 80, 1), H / Math.max(y1 - y0 + 80, 1), 60));
      view = { zoom: z, dx: -((x0 + x1) / 2 - W / 2) * z, dy: -((y0 + y1) / 2 - H / 2) * z };
      draw();
    }
    search.addEventListener("input", find);
    search.addEventListener("keydown", function (ev) { if (ev.key === "Enter") zoomToFound(); });
    function nearest(x, y) {
      var best = -1, bd = 64, cx = Math.floor(x / CELL), cy = Math.floor(y / CELL);
      for (var dx = -1; dx <= 1; dx++) for (var dy = -1; dy <= 1; dy++) {
        var cell = grid[(cx + dx) + "," + (cy + dy)];
        if (cell) cell.forEach(function (i) { var d = (px[i] - x) * (px[i] - x) + (py[i] - y) * (py[i] - y); if (d < bd) { bd = d; best = i; } });
      }
      return best;
    }
    canvas.addEventListener("mousemove", function (ev) {
      var rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top, i = nearest(x, y);
      if (i < 0) { tip.hidden = true; return; }
      tip.textContent = "";
      tip.appendChild(el("span", "tok", displayToken(m.tok[i])));
      var bits = ["  id " + m.id[i]];
      if (m.cat) bits.push(m.cat_levels[m.cat[i]]);
      if (m.script) bits.push(m.script_levels[m.script[i]]);
      if (m.score) bits.push("score " + fmt(m.score[i]));
      if (m.flag && m.flag[i]) bits.push("flagged");
      tip.appendChild(document.createTextNode(displayToken(bits.join(" · "))));
      tip.hidden = false;
      var left = Math.min(x + 14, W - tip.offsetWidth - 4);
      tip.style.left = Math.max(0, left) + "px"; tip.style.top = (y + 14) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    sel.addEventListener("change", draw);
    var pending = null;
    window.addEventListener("resize", function () { clearTimeout(pending); pending = setTimeout(draw, 120); });
    draw();
  }

