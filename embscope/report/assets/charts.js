/* embscope report, part 3 of 4 (histograms, RoPE wavelengths, KV cache, embedding share). The renderer joins the parts, in order, inside one
   function scope: no globals but window.embscopeDisplayToken and window.embscopeFmt. Plain DOM, canvas and SVG; no
   third-party code, no network. Untrusted text (tokens, terms, names) is only ever written with
   textContent, after displayToken(). */
  /* ---- generic SVG charts ---- */
  function frame(w, h, m) { return { w: w, h: h, m: m, iw: w - m.l - m.r, ih: h - m.t - m.b }; }
  function histogram(id, h, label) {
    var box = document.getElementById(id);
    if (!box) return;
    if (!h) { noData(box, label); return; }
    var f = frame(560, 230, { l: 46, r: 10, t: 10, b: 34 }), n = h.counts.length;
    var svg = sv("svg", { viewBox: "0 0 " + f.w + " " + f.h, role: "img" });
    var maxC = 0; h.counts.forEach(function (c) { if (c > maxC) maxC = c; });
    var ly = function (c) { return f.m.t + f.ih - (Math.log10(1 + c) / Math.log10(1 + maxC || 10)) * f.ih; };
    var lo = h.edges[0], hi = h.edges[n], bx = function (v) { return f.m.l + (v - lo) / ((hi - lo) || 1) * f.iw; };
    for (var p = 0; Math.pow(10, p) <= maxC; p++) {
      var y = ly(Math.pow(10, p));
      svg.appendChild(sv("line", { x1: f.m.l, x2: f.w - f.m.r, y1: y, y2: y, stroke: "#eef0f3" }));
      svg.appendChild(sv("text", { x: f.m.l - 6, y: y + 4, "text-anchor": "end" }, p === 0 ? "1" : "1e" + p));
    }
    for (var i = 0; i < n; i++) {
      var x0 = bx(h.edges[i]), x1 = bx(h.edges[i + 1]);
      if (h.counts[i]) svg.appendChild(sv("rect", { x: x0 + 0.5, width: Math.max(x1 - x0 - 1, 0.5), y: ly(h.counts[i]), height: f.m.t + f.ih - ly(h.counts[i]), fill: "#9db4d6" }));
      if (h.flagged && h.flagged[i]) svg.appendChild(sv("rect", { x: x0 + 0.5, width: Math.max(x1 - x0 - 1, 0.5), y: ly(h.flagged[i]), height: f.m.t + f.ih - ly(h.flagged[i]), fill: "#c2410c", opacity: 0.85 }));
    }
    niceTicks(lo, hi, 6).forEach(function (t) {
      svg.appendChild(sv("line", { x1: bx(t), x2: bx(t), y1: f.m.t + f.ih, y2: f.m.t + f.ih + 4, stroke: "#98a2b3" }));
      svg.appendChild(sv("text", { x: bx(t), y: f.m.t + f.ih + 16, "text-anchor": "middle" }, fmt(t)));
    });
    svg.appendChild(sv("line", { x1: f.m.l, x2: f.w - f.m.r, y1: f.m.t + f.ih, y2: f.m.t + f.ih, stroke: "#98a2b3" }));
    var anyFlagged = (h.flagged || []).some(function (c) { return c > 0; });
    svg.appendChild(sv("text", { x: f.m.l + f.iw / 2, y: f.h - 2, "text-anchor": "middle" }, "L2 norm · count on log scale" + (anyFlagged ? " · flagged rows in orange" : "")));
    box.textContent = ""; box.appendChild(svg);
    if (h.equal) {  /* a normalised matrix: say so, the bars alone suggest a spread that is not there */
      var p = el("p", "caution small equal-norms", "The norms are all about equal: every row lies between " + fmt(h.min) + " and " + fmt(h.max) +
        " (a spread of " + (h.spread * 100).toPrecision(2) + " % of the median), so the norm tells nothing about which rows were trained here; the other indicators decide.");
      box.appendChild(p);
    }
  }

  function wavelengthChart(ctx) {
    var box = document.getElementById("wavelength-chart");
    if (!box) return;
    var wl = ctx.wavelengths;
    if (!wl || !wl.length) { noData(box, ctx.position_encoding && ctx.position_encoding !== "rope" ? "the model uses " + displayToken(ctx.position_encoding) + " positions, not RoPE" : "no wavelengths in the context summary"); return; }
    var f = frame(560, 250, { l: 52, r: 12, t: 12, b: 34 }), n = wl.length;
    var lines = [];
    if (ctx.original_max_positions) lines.push([ctx.original_max_positions, "trained context", "#c2410c"]);
    if (ctx.max_positions && ctx.max_positions !== ctx.original_max_positions) lines.push([ctx.max_positions, "max context", "#7c3aed"]);
    var vals = wl.concat(ctx.wavelengths_scaled || []).filter(function (v) { return v > 0; }).concat(lines.map(function (l) { return l[0]; }));
    var lo = Math.floor(Math.log10(Math.min.apply(null, vals))), hi = Math.ceil(Math.log10(Math.max.apply(null, vals)));
    var y = function (v) { return f.m.t + f.ih - (Math.log10(v) - lo) / ((hi - lo) || 1) * f.ih; };
    var x = function (i) { return f.m.l + (n > 1 ? i / (n - 1) : 0.5) * f.iw; };
    var svg = sv("svg", { viewBox: "0 0 " + f.w + " " + f.h, role: "img" });
    for (var p = lo; p <= hi; p++) {
      svg.appendChild(sv("line", { x1: f.m.l, x2: f.w - f.m.r, y1: y(Math.pow(10, p)), y2: y(Math.pow(10, p)), stroke: "#eef0f3" }));
      svg.appendChild(sv("text", { x: f.m.l - 6, y: y(Math.pow(10, p)) + 4, "text-anchor": "end" }, "1e" + p));
    }
    var train = ctx.original_max_positions || Infinity, path = "";
    wl.forEach(function (v, i) { if (v > 0) path += (path ? "L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1); });
    svg.appendChild(sv("path", { d: path, fill: "none", stroke: "#9db4d6", "stroke-width": 1.5 }));
    var ws = ctx.wavelengths_scaled || [], scaled = ws.length === n && ws.some(function (v, i) { return Math.abs(v - wl[i]) > 1e-6 * wl[i]; });
    if (scaled) {
      var p2 = "";
      ws.forEach(function (v, i) { if (v > 0) p2 += (p2 ? "L" : "M") + x(i).toFixed(1) + "," + y(v).toFixed(1); });
      svg.appendChild(sv("path", { d: p2, fill: "none", stroke: "#7c3aed", "stroke-width": 1.5, "stroke-dasharray": "4 3" }));
      svg.appendChild(sv("text", { x: f.w - f.m.r - 4, y: f.m.t + 12, "text-anchor": "end", style: "fill:#7c3aed" }, "dashed: after " + displayToken(ctx.rope_type || "") + " scaling"));
    }
    var drawn = { blue: 0, orange: 0 };
    wl.forEach(function (v, i) {
      if (!(v > 0)) return;
      drawn[v > train ? "orange" : "blue"]++;
      svg.appendChild(sv("circle", { cx: x(i), cy: y(v), r: 2.4, fill: v > train ? "#c2410c" : "#2f6fde" }));
    });
    lines.forEach(function (l) {
      svg.appendChild(sv("line", { x1: f.m.l, x2: f.w - f.m.r, y1: y(l[0]), y2: y(l[0]), stroke: l[2], "stroke-dasharray": "5 4" }));
      svg.appendChild(sv("text", { x: f.m.l + 6, y: y(l[0]) - 5, fill: l[2], style: "fill:" + l[2] }, l[1] + " " + fmt(l[0])));
    });
    niceTicks(0, n - 1, 8).forEach(function (t) {
      svg.appendChild(sv("text", { x: x(t), y: f.m.t + f.ih + 16, "text-anchor": "middle" }, String(t)));
    });
    svg.appendChild(sv("text", { x: f.m.l + f.iw / 2, y: f.h - 2, "text-anchor": "middle" }, "dimension pair i · " + wavelengthKey(drawn, ctx)));
    box.textContent = ""; box.appendChild(svg);
  }
  /* The wavelength chart's key names only the marks it drew: both colours when the trained context
     splits the pairs, else what the one colour means. */
  function wavelengthKey(drawn, ctx) {
    if (!ctx.original_max_positions) return "trained context unknown: no pair marked as past it";
    if (drawn.blue && drawn.orange) return "blue: turns fully within the trained context; orange: does not";
    if (drawn.orange) return "orange: no pair turns fully within the trained context";
    return "blue: every pair turns fully within the trained context";
  }

  function kvChart(ctx) {
    var box = document.getElementById("kv-chart");
    if (!box) return;
    var at = ctx.kv_bytes_at;
    if (!at || !Object.keys(at).length) { noData(box, "no KV-cache sizes in the context summary"); return; }
    var keys = Object.keys(at), maxB = 0;
    keys.forEach(function (k) { ["bf16", "fp8"].forEach(function (d) { if ((at[k] || {})[d] > maxB) maxB = at[k][d]; }); });
    var f = frame(560, 262, { l: 58, r: 10, t: 24, b: 40 });  /* the key above the bars, never on them */
    var svg = sv("svg", { viewBox: "0 0 " + f.w + " " + f.h, role: "img" });
    var unit = maxB >= 1073741824 ? [1073741824, "GiB"] : [1048576, "MiB"];
    var yv = function (b) { return f.m.t + f.ih - b / (maxB || 1) * f.ih; };
    niceTicks(0, maxB / unit[0], 5).forEach(function (t) {
      svg.appendChild(sv("line", { x1: f.m.l, x2: f.w - f.m.r, y1: yv(t * unit[0]), y2: yv(t * unit[0]), stroke: "#eef0f3" }));
      svg.appendChild(sv("text", { x: f.m.l - 6, y: yv(t * unit[0]) + 4, "text-anchor": "end" }, fmt(t) + " " + unit[1]));
    });
    var gw = f.iw / keys.length, bw = Math.min(gw * 0.34, 46), pastDrawn = false;
    keys.forEach(function (k, i) {
      var cx = f.m.l + gw * (i + 0.5);
      /* a row past the model's own context: drawn faded and outlined, named in the key */
      var past = ctx.max_positions && /^\d+$/.test(k) && +k > ctx.max_positions;
      if (past) pastDrawn = true;
      [["bf16", "#2f6fde", -1], ["fp8", "#93c5fd", 0]].forEach(function (d) {
        var b = (at[k] || {})[d[0]];
        if (typeof b !== "number") return;
        var r = sv("rect", { x: cx + d[2] * bw, width: bw - 2, y: yv(b), height: f.m.t + f.ih - yv(b), fill: d[1], rx: 2 });
        if (past) { r.setAttribute("fill-opacity", "0.35"); r.setAttribute("stroke", d[1]); r.setAttribute("stroke-dasharray", "3 2"); }
        r.appendChild(sv("title", {}, d[0] + " at " + displayToken(k) + ": " + gib(b) + (past ? " (past the model's context)" : "")));
        svg.appendChild(r);
      });
      var label = /^\d+$/.test(k) ? (+k >= 1024 ? (+k / 1024) + "k" : k) : displayToken(k);
      svg.appendChild(sv("text", { x: cx, y: f.m.t + f.ih + 16, "text-anchor": "middle" }, label + (past ? " (past)" : "")));
    });
    svg.appendChild(sv("rect", { x: f.m.l + 4, y: 4, width: 10, height: 10, fill: "#2f6fde" }));
    svg.appendChild(sv("text", { x: f.m.l + 18, y: 13 }, "bf16"));
    svg.appendChild(sv("rect", { x: f.m.l + 56, y: 4, width: 10, height: 10, fill: "#93c5fd" }));
    svg.appendChild(sv("text", { x: f.m.l + 70, y: 13 }, "fp8"));
    if (pastDrawn) svg.appendChild(sv("text", { x: f.m.l + 104, y: 13 }, "faded: past the model's context (" + fmt(ctx.max_positions) + ")"));
    svg.appendChild(sv("text", { x: f.m.l + f.iw / 2, y: f.h - 4, "text-anchor": "middle" }, "context length (tokens)"));
    box.textContent = ""; box.appendChild(svg);
  }

  function shareBar() {
    var box = document.getElementById("share-bar");
    if (!box) return;
    var s = parseFloat(box.getAttribute("data-share"));
    if (isNaN(s)) { noData(box, "no embedding share"); return; }
    var a = el("div"); a.style.width = Math.max(s * 100, 0.5) + "%"; a.style.background = "#2f6fde";
    var b = el("div"); b.style.width = (100 - Math.max(s * 100, 0.5)) + "%"; b.style.background = "#cbd5e1";
    var t1 = el("span", null, (s * 100).toFixed(1) + "% embeddings"); a.appendChild(t1);
    b.appendChild(el("span", null, "rest of the model")); b.firstChild.style.color = "#344054";
    box.appendChild(a); box.appendChild(b);
    if (s < 0.15) { t1.style.color = "#344054"; a.removeChild(t1); b.firstChild.textContent = (s * 100).toFixed(1) + "% embeddings · rest of the model"; }
  }

