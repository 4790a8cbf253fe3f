/* embscope report, part 1 of 4 (data, display rule, DOM helpers, colours, sortable tables). The renderer joins the parts, in order, inside one
   function scope: no globals but window.embscopeDisplayToken and window.embscopeFmt. Plain DOM, canvas and SVG; no
   third-party code, no network. Untrusted text (tokens, terms, names) is only ever written with
   textContent, after displayToken(). */
  var DATA = JSON.parse(document.getElementById("embscope-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";

  /* Same rule as embscope.report.escape.display_token: controls (Cc), format characters (Cf:
     bidi overrides, zero-width), lone surrogates (Cs), line/paragraph separators (Zl, Zp) become
     code points: \n \t \r, \xNN below U+0100, \uNNNN, \UNNNNNNNN. */
  var HIDDEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}]/gu;
  var SHORT = { "\n": "\\n", "\t": "\\t", "\r": "\\r" };
  function hex(n, w) { var s = n.toString(16); while (s.length < w) s = "0" + s; return s; }
  function displayToken(s) {
    if (s === null || s === undefined) return "";
    return String(s).replace(HIDDEN, function (ch) {
      if (SHORT[ch]) return SHORT[ch];
      var cp = ch.codePointAt(0);
      if (cp < 0x100) return "\\x" + hex(cp, 2);
      if (cp < 0x10000) return "\\u" + hex(cp, 4);
      return "\\U" + hex(cp, 8);
    });
  }
  window.embscopeDisplayToken = displayToken;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  }
  function sv(tag, attrs, text) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  /* Same rule as embscope.report.render.fmt: thousands separators from 1,000 up, four
     significant digits below (trailing zeros dropped), under 5e-5 two significant digits as plain
     decimals (never scientific notation; under 1e-9 "< 0.000000001"), never "-0". */
  function noNegZero(t) { return /^-[0.]*$/.test(t) ? t.slice(1) : t; }
  function fmt(v) {
    if (v === null || v === undefined || (typeof v === "number" && !isFinite(v))) return "—";
    if (typeof v === "boolean") return v ? "yes" : "no";
    if (typeof v === "number") {
      if (Number.isInteger(v)) return v === 0 ? "0" : v.toLocaleString("en-US");
      var a = Math.abs(v);
      if (a >= 1000) return noNegZero(v.toLocaleString("en-US", { maximumFractionDigits: 0 }));
      if (a < 1e-9) return (v < 0 ? "-" : "") + "< 0.000000001";
      if (a < 5e-5) return noNegZero(v.toFixed(1 - Math.floor(Math.log10(a))).replace(/\.?0+$/, ""));
      var d = a < 1 ? 4 : 3 - Math.floor(Math.log10(a));
      return noNegZero(v.toFixed(d).replace(/\.?0+$/, ""));
    }
    return displayToken(String(v));
  }
  window.embscopeFmt = fmt;  /* for the tests: the same rule as embscope.report.render.fmt */
  /* Fixed decimals for a table column (aligned digits), never "-0.000". */
  function fmtFixed(v, d) {
    if (typeof v !== "number" || !isFinite(v)) return fmt(v);
    return noNegZero(v.toFixed(d));
  }
  function gib(b) {
    if (typeof b !== "number") return "—";
    if (b >= 1073741824) return (b / 1073741824).toFixed(2) + " GiB";
    if (b >= 1048576) return (b / 1048576).toFixed(1) + " MiB";
    return (b / 1024).toFixed(1) + " KiB";
  }
  function noData(container, reason) {
    container.textContent = "";
    container.appendChild(el("p", "nodata", "no data: " + reason));
  }
  function niceTicks(lo, hi, n) {
    var span = hi - lo || 1, step = Math.pow(10, Math.floor(Math.log10(span / n)));
    var err = span / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3) step *= 5; else if (err >= 1.5) step *= 2;
    var out = [];
    for (var t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push(+t.toPrecision(12));
    return out;
  }

  /* ---- colour ramps ---- */
  var VIRIDIS = ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725"];
  function hexRgb(h) { return [parseInt(h.substr(1, 2), 16), parseInt(h.substr(3, 2), 16), parseInt(h.substr(5, 2), 16)]; }
  function ramp(stops, t) {
    t = Math.max(0, Math.min(1, t));
    var x = t * (stops.length - 1), i = Math.min(Math.floor(x), stops.length - 2), f = x - i;
    var a = hexRgb(stops[i]), b = hexRgb(stops[i + 1]);
    return "rgb(" + Math.round(a[0] + (b[0] - a[0]) * f) + "," + Math.round(a[1] + (b[1] - a[1]) * f) + "," + Math.round(a[2] + (b[2] - a[2]) * f) + ")";
  }
  var CAT_COLOURS = { normal: "#9db4d6", special: "#7c3aed", byte: "#0d9488", unreachable: "#ea580c",
    undecodable: "#ca8a04", padding: "#475467", unknown: "#98a2b3" };
  var PALETTE = ["#2f6fde", "#e8590c", "#2b8a3e", "#c2255c", "#7048e8", "#0c8599", "#e67700", "#5c940d", "#862e9c", "#1864ab", "#a61e4d"];

  /* ---- sortable tables (server-rendered ones and ours) ---- */
  function cellKey(td) {
    var raw = td.getAttribute("data-v");
    var t = raw !== null ? raw : td.textContent;
    var num = parseFloat(t.replace(/[,×%\s]/g, ""));
    return isNaN(num) || !/^[-+\d.,\s×%e]+$/i.test(t.trim()) ? { s: t.toLowerCase(), n: null } : { s: t, n: num };
  }
  function makeSortable(table) {
    var ths = table.tHead ? table.tHead.rows[0].cells : [];
    Array.prototype.forEach.call(ths, function (th, col) {
      th.classList.add("sortable-col");
      th.addEventListener("click", function () {
        var desc = th.getAttribute("aria-sort") !== "descending";
        Array.prototype.forEach.call(ths, function (o) { o.removeAttribute("aria-sort"); });
        th.setAttribute("aria-sort", desc ? "descending" : "ascending");
        var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        var keys = rows.map(function (r) { return cellKey(r.cells[col] || el("td")); });
        var order = rows.map(function (_, i) { return i; });
        order.sort(function (i, j) {
          var a = keys[i], b = keys[j], c;
          if (a.n !== null && b.n !== null) c = a.n - b.n;
          else if (a.n !== null) return -1;
          else if (b.n !== null) return 1;
          else c = a.s < b.s ? -1 : a.s > b.s ? 1 : 0;
          return desc ? -c : c;
        });
        order.forEach(function (i) { body.appendChild(rows[i]); });
        if (table.__repage) table.__repage();
      });
    });
  }

  /* ---- long tables: the first rows and a button for the rest (no inner scroll box) ---- */
  function pageTable(table, size) {
    var body = table.tBodies[0];
    if (!body || body.rows.length <= size) return;
    var expanded = false, n = body.rows.length;
    var btn = el("button", "more");
    btn.type = "button";
    function repage() {
      Array.prototype.forEach.call(body.rows, function (row, i) { row.hidden = !expanded && i >= size; });
      btn.textContent = expanded ? "Show the first " + size + " rows" : "Show all " + n.toLocaleString("en-US") + " rows";
    }
    btn.addEventListener("click", function () { expanded = !expanded; repage(); });
    table.__repage = repage;
    var box = table.parentNode.classList.contains("tablewrap") ? table.parentNode : table;
    box.parentNode.insertBefore(btn, box.nextSibling);
    repage();
  }

