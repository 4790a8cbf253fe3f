/* embscope report, part 4 of 4 (language heatmap or bars, then drawing everything). The renderer joins the parts, in order, inside one
   function scope: no globals but window.embscopeDisplayToken and window.embscopeFmt. Plain DOM, canvas and SVG; no
   third-party code, no network. Untrusted text (tokens, terms, names) is only ever written with
   textContent, after displayToken(). */
  /* ---- languages heatmap (several tokenizers) or sorted bars (one) ---- */
  var METRIC_HELP = { fertility: "tokens per word (lower is cheaper)", parity: "tokens relative to the reference language (1 = same cost)",
    tokens_per_char: "tokens per character (lower is cheaper)", bytes_per_token: "UTF-8 bytes per token (higher is cheaper)",
    split_word_rate: "share of words split into 2+ tokens", single_token_word_rate: "share of words that are one token",
    unk_rate: "share of unknown tokens", byte_fallback_rate: "share of byte-fallback tokens", vocab_utilisation: "share of the vocabulary used" };
  var HIGHER_BETTER = { bytes_per_token: 1, single_token_word_rate: 1, roundtrip: 1, vocab_utilisation: 1 };
  /* metrics whose denominator is a word: a language counted per character, cluster or syllable
     (Thai, Chinese, Tibetan …) is ranked apart on them, never beside the per-word languages */
  var PER_WORD = { fertility: 1, split_word_rate: 1, single_token_word_rate: 1 };
  function languages() {
    var L = DATA.languages || {}, table = document.getElementById("lang-heat");
    if (!table) return;
    if (L.reason || !L.rows) return;
    var sel = document.getElementById("lang-metric"), note = document.getElementById("lang-note");
    var skip = { tokenizer: 1, language: 1, language_name: 1, script: 1, words: 1, chars: 1, bytes: 1, tokens: 1,
      parity_units: 1, texts: 1 };
    var help = (DATA.help || {}).languages || {};
    var isEnd = function (c) { return /_(lo|hi)$/.test(c); };  /* interval ends: drawn with their metric */
    var metrics = L.columns.filter(function (c) { return !skip[c] && !isEnd(c) && L.rows.some(function (r) { return typeof r[c] === "number"; }); });
    function ends(r, metric) {
      var a = r[metric + "_lo"], b = r[metric + "_hi"];
      return typeof a === "number" && typeof b === "number" ? [a, b] : null;
    }
    ["fertility", "parity"].reverse().forEach(function (pref) {
      var k = metrics.indexOf(pref); if (k > 0) { metrics.splice(k, 1); metrics.unshift(pref); }
    });
    metrics.forEach(function (c) { var o = el("option", null, (help[c] || {}).label || c); o.value = c; sel.appendChild(o); });
    var toks = [], langs = [], info = {};
    L.rows.forEach(function (r) {
      if (toks.indexOf(r.tokenizer) < 0) toks.push(r.tokenizer);
      if (langs.indexOf(r.label) < 0) { langs.push(r.label); info[r.label] = r; }
    });
    function name(lang) { var r = info[lang]; return displayToken(r.display || lang) + (r.per_word === false ? " *" : ""); }
    function unitNote(lang) { var r = info[lang]; return r.per_word === false ? "counted per " + displayToken(r.unit) : ""; }
    function draw() {
      var metric = sel.value, vals = {}, cis = {}, lo = Infinity, hi = -Infinity, apart = !!PER_WORD[metric];
      L.rows.forEach(function (r) {
        var v = r[metric], e = ends(r, metric); vals[r.tokenizer + "\u0000" + r.label] = v; cis[r.tokenizer + "\u0000" + r.label] = e;
        if (typeof v === "number") { if (v < lo) lo = v; if (v > hi) hi = v; }
        if (e && e[1] > hi) hi = e[1];
      });
      var level = L.level || "95 %";
      var ciText = function (e) { return e ? fmt(e[0]) + "–" + fmt(e[1]) : ""; };
      note.textContent = METRIC_HELP[metric] || (help[metric] || {}).tip || "";
      table.textContent = "";
      var old = document.getElementById("lang-bars");
      if (old) old.parentNode.removeChild(old);
      var key0 = function (lang) { var v = vals[toks[0] + "\u0000" + lang]; return typeof v === "number" ? v : Infinity; };
      var sep = function (lang) { return apart && info[lang].per_word === false ? 1 : 0; };
      langs.sort(function (a, b) { return sep(a) - sep(b) || key0(a) - key0(b); });
      var firstApart = langs.findIndex(function (lang) { return sep(lang) === 1; });
      var apartText = "* counted per character, cluster or syllable (scripts written without spaces): tokens per " +
        "such unit, not per word, so ranked apart from the languages above";
      var shade = function (v) {
        if (metric === "parity") return Math.min(Math.max((v - 0.8) / 2.2, 0), 1);
        var t = (v - lo) / ((hi - lo) || 1); return HIGHER_BETTER[metric] ? 1 - t : t;
      };
      if (toks.length === 1) {  /* one tokenizer: sorted bars read better than a one-column heatmap */
        table.parentNode.hidden = true;
        var bars = el("div", "bars"); bars.id = "lang-bars";
        langs.forEach(function (lang, k) {
          if (k === firstApart) bars.appendChild(el("div", "barsep", apartText));
          var v = vals[toks[0] + "\u0000" + lang], row = el("div", "barrow" + (sep(lang) ? " apart" : ""));
          var lbl = el("span", "lbl", name(lang)); lbl.title = displayToken(info[lang].display || lang) + (unitNote(lang) ? " · " + unitNote(lang) : "");
          row.appendChild(lbl);
          var track = el("span", "track"), fill = el("span", "fill");
          if (typeof v === "number") { fill.style.width = Math.max(v / (hi || 1) * 100, 0.5) + "%"; fill.style.background = ramp(["#9fd3b0", "#f5d77a", "#f4a582", "#d6604d"], shade(v)); }
          track.appendChild(fill);
          var e = cis[toks[0] + "\u0000" + lang];
          if (e) {  /* the bootstrap interval as an error bar over the bar */
            var bar = el("span", "err");
            bar.style.left = Math.max(e[0] / (hi || 1) * 100, 0) + "%";
            bar.style.width = Math.max((e[1] - e[0]) / (hi || 1) * 100, 0.2) + "%";
            bar.title = level + " interval " + ciText(e);
            track.appendChild(bar);
            lbl.title += " · " + level + " interval " + ciText(e);
          }
          row.appendChild(track);
          row.appendChild(el("span", "val", typeof v === "number" ? fmt(v) + (metric === "parity" ? "×" : "") : "—"));
          bars.appendChild(row);
        });
        table.parentNode.parentNode.insertBefore(bars, table.parentNode);
        return;
      }
      table.parentNode.hidden = false;
      var head = el("tr"); head.appendChild(el("th", null, "language \\ tokenizer"));
      toks.forEach(function (t) { head.appendChild(el("th", null, displayToken(t))); });
      var thead = el("thead"); thead.appendChild(head); table.appendChild(thead);
      var tbody = el("tbody");
      langs.forEach(function (lang, k) {
        if (k === firstApart) {
          var s = el("tr", "sep"), c = el("td", null, apartText); c.colSpan = toks.length + 1; s.appendChild(c); tbody.appendChild(s);
        }
        var tr = el("tr"), th = el("th", null, name(lang)); th.title = unitNote(lang); tr.appendChild(th);
        toks.forEach(function (t) {
          var v = vals[t + "\u0000" + lang], td = el("td", null, typeof v === "number" ? fmt(v) + (metric === "parity" ? "×" : "") : "—");
          var e = cis[t + "\u0000" + lang];
          if (e) { td.appendChild(el("span", "ci", ciText(e))); td.title = level + " bootstrap interval " + ciText(e); }
          if (typeof v === "number") {
            var tt = shade(v);
            td.style.background = ramp(["#e6f4ea", "#fff7d6", "#fde2c8", "#f4a582", "#d6604d"], tt);
            if (tt > 0.8) td.style.color = "#fff";
          }
          tr.appendChild(td);
        });
        tbody.appendChild(tr);
      });
      table.appendChild(tbody);
    }
    sel.addEventListener("change", draw);
    if (metrics.length) draw(); else noData(table.parentNode, "no numeric columns in languages.parquet");
  }

  function safe(name, fn) {
    try { fn(); } catch (err) { if (window.console) console.error("embscope: " + name + " failed: " + err); }
  }
  var VIEW = DATA.view || {}, ctx = VIEW.ctx || {};
  safe("token table", topTable);
  safe("token map", tokenMap);
  safe("histograms", function () {
    var h = (DATA.tokens || {}).hist || {}, why = (DATA.tokens || {}).reason;
    histogram("hist-in_norm", h.in_norm, why || "no in_norm column");
    histogram("hist-out_norm", h.out_norm, why || ((VIEW.model || {}).tied ? "the output matrix is tied to the input embedding" : "no out_norm column"));
  });
  safe("languages", languages);
  safe("wavelengths", function () { wavelengthChart(ctx); });
  safe("kv", function () { kvChart(ctx); });
  safe("share", shareBar);
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), makeSortable);
  Array.prototype.forEach.call(document.querySelectorAll("table.paged"), function (t) {
    pageTable(t, parseInt(t.getAttribute("data-page"), 10) || 20);
  });
  document.documentElement.setAttribute("data-rendered", "1");
