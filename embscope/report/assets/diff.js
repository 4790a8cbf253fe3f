/* embscope report, the "What training changed" section (the diff's token map and per-language drift
   chart). The renderer joins the parts, in order, inside one function scope: no globals but
   window.embscopeDisplayToken and window.embscopeFmt. Plain DOM, canvas and SVG; no third-party code, no network.
   Untrusted text (tokens, languages) is only ever written with textContent, after displayToken(). */
  var DIFF_STATES = [["#c7ced9", "unmoved"], ["#2f6fde", "moved"], ["#e8590c", "new, moved"], ["#c2255c", "new, unmoved"]];
  function diffMap() {
    var canvas = document.getElementById("diff-map-canvas");
    if (!canvas) return;
    var m = (DATA.diff || {}).map;
    if (!m) { noData(document.getElementById("diff-map-panel"), (DATA.diff || {}).reason || "no map"); return; }
    var n = m.x.length, tip = document.getElementById("diff-map-tip"), legend = document.getElementById("diff-map-legend");
    document.getElementById("diff-map-note").textContent = "BASE's first two principal components (new rows at their tuned row). " +
      (m.n_shown < m.n_total ? "Showing " + m.n_shown.toLocaleString("en-US") + " of " + m.n_total.toLocaleString("en-US") +
        " rows: every new row, moved rows and a sample of the unmoved. " : "") + m.n_moved.toLocaleString("en-US") + " rows moved. Hover a point to see its token.";
    DIFF_STATES.forEach(function (st, k) {  /* the key names only the kinds of point drawn */
      if (m.state.indexOf(k) < 0) return;
      var s = el("span"), sw = el("span", "sw"); sw.style.background = st[0]; s.appendChild(sw);
      s.appendChild(document.createTextNode(st[1])); legend.appendChild(s);
    });
    if (m.used && m.used.some(function (u) { return u; })) legend.appendChild(el("span", null, "· rows the data uses are outlined"));
    var minX = Infinity, maxX = -Infinity, minY = Infinity, maxY = -Infinity, i;
    for (i = 0; i < n; i++) {
      minX = Math.min(minX, m.x[i]); maxX = Math.max(maxX, m.x[i]); minY = Math.min(minY, m.y[i]); maxY = Math.max(maxY, m.y[i]);
    }
    var px = new Float32Array(n), py = new Float32Array(n), W = 0, H = 0, PAD = 14;
    var order = []; for (i = 0; i < n; i++) order.push(i);
    var rank = [0, 1, 3, 2];
    order.sort(function (a, b) { return rank[m.state[a]] - rank[m.state[b]]; });  /* unmoved underneath */
    function draw() {
      var dpr = window.devicePixelRatio || 1, rect = canvas.getBoundingClientRect();
      W = rect.width; H = rect.height;
      canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr);
      var ctx = canvas.getContext("2d"); ctx.setTransform(dpr, 0, 0, dpr, 0, 0); ctx.clearRect(0, 0, W, H);
      var sx = (W - 2 * PAD) / ((maxX - minX) || 1), sy = (H - 2 * PAD) / ((maxY - minY) || 1);
      order.forEach(function (k) {
        px[k] = PAD + (m.x[k] - minX) * sx; py[k] = H - PAD - (m.y[k] - minY) * sy;
        var st = m.state[k];
        ctx.globalAlpha = st === 0 ? 0.5 : 0.85; ctx.fillStyle = DIFF_STATES[st][0];
        ctx.beginPath(); ctx.arc(px[k], py[k], st >= 2 ? 3 : 1.8, 0, 6.2832); ctx.fill();
        if (m.used && m.used[k]) { ctx.globalAlpha = 1; ctx.strokeStyle = "#111827"; ctx.lineWidth = 0.7; ctx.stroke(); }
      });
      ctx.globalAlpha = 1;
    }
    canvas.addEventListener("mousemove", function (ev) {
      var rect = canvas.getBoundingClientRect(), x = ev.clientX - rect.left, y = ev.clientY - rect.top, best = -1, bd = 49;
      for (var k = 0; k < n; k++) { var d = (px[k] - x) * (px[k] - x) + (py[k] - y) * (py[k] - y); if (d < bd) { bd = d; best = k; } }
      if (best < 0) { tip.hidden = true; return; }
      tip.textContent = ""; tip.appendChild(el("span", "tok", displayToken(m.tok[best])));
      var bits = ["  id " + m.id[best], DIFF_STATES[m.state[best]][1]];
      if (m.change && m.change[best] !== null) bits.push("‖Δ‖/‖r‖ " + fmt(m.change[best]));
      if (m.used) bits.push(m.used[best] ? "in the data" : "not in the data");
      tip.appendChild(document.createTextNode(bits.join(" · ")));
      tip.hidden = false;
      tip.style.left = Math.max(0, Math.min(x + 14, W - tip.offsetWidth - 4)) + "px"; tip.style.top = (y + 14) + "px";
    });
    canvas.addEventListener("mouseleave", function () { tip.hidden = true; });
    var pending = null;
    window.addEventListener("resize", function () { clearTimeout(pending); pending = setTimeout(draw, 120); });
    draw();
  }

  /* moved share per language, most moved first: horizontal bars */
  function diffLanguages() {
    var box = document.getElementById("diff-lang-chart");
    if (!box) return;
    var rows = ((VIEW_DF().languages) || []).slice(0, 60);
    if (!rows.length) { noData(box, "no languages"); return; }
    var rowH = 14, f = frame(560, 24 + rows.length * rowH, { l: 92, r: 60, t: 6, b: 18 });
    var svg = sv("svg", { viewBox: "0 0 " + f.w + " " + f.h, role: "img" });
    var top = Math.max.apply(null, rows.map(function (r) { return r.moved_share || 0; })) || 1;
    rows.forEach(function (r, k) {
      var y = f.m.t + k * rowH, w = (r.moved_share || 0) / top * f.iw;
      var label = sv("text", { x: f.m.l - 6, y: y + rowH - 4, "text-anchor": "end" }, displayToken(r.language));
      if (r.name) label.appendChild(sv("title", {}, displayToken(r.name)));
      svg.appendChild(label);
      svg.appendChild(sv("rect", { x: f.m.l, y: y + 2, width: Math.max(w, 0.5), height: rowH - 4, fill: "#2f6fde", opacity: 0.8 }));
      svg.appendChild(sv("text", { x: f.m.l + w + 4, y: y + rowH - 4 }, fmt(100 * (r.moved_share || 0)) + " %"));
    });
    svg.appendChild(sv("text", { x: f.m.l + f.iw / 2, y: f.h - 4, "text-anchor": "middle" }, "share of the language's tokens whose input row moved"));
    box.textContent = ""; box.appendChild(svg);
  }
  function VIEW_DF() { return (DATA.view || {}).df || {}; }
  safe("diff map", diffMap);
  safe("diff languages", diffLanguages);
