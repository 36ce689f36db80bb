// Gateway console: progressive enhancements. Every page works without this file
// except the live traffic charts and the operations explorer.
(function () {
  "use strict";

  var $ = function (sel, root) { return (root || document).querySelector(sel); };
  var $$ = function (sel, root) { return Array.prototype.slice.call((root || document).querySelectorAll(sel)); };

  function csrfToken() { var meta = $('meta[name="csrf-token"]'); return meta ? meta.getAttribute("content") : ""; }

  // Writes a message into the page's status region.
  function announce(text, ok) {
    var region = $(".flash-region [role=status]");
    if (!region) { return; }
    region.textContent = text;
    region.className = "flash " + (ok ? "ok" : "error");
  }

  function cssVar(name) {
    return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
  }

  function isNumber(v) { return typeof v === "number" && isFinite(v); }
  function fixed(value, digits) { return isNumber(value) ? value.toFixed(digits) : "—"; }
  function percent(value) { return isNumber(value) ? (value * 100).toFixed(1) + " %" : "—"; }

  // ---- Navigation: open the menu on wide screens, keep it collapsible on narrow ones.
  function setUpMenu() {
    document.documentElement.classList.add("js");
    var menu = $(".menu");
    if (!menu || !window.matchMedia) { return; }
    var wide = window.matchMedia("(min-width: 60rem)");
    var apply = function () { menu.open = wide.matches; };
    apply();
    if (wide.addEventListener) { wide.addEventListener("change", apply); }
  }

  // ---- Confirmation of destructive forms.
  function setUpConfirm() {
    document.addEventListener("submit", function (event) {
      var form = event.target;
      if (!(form instanceof HTMLFormElement)) { return; }
      var submitter = event.submitter;
      var message = (submitter && submitter.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
      if (message && !window.confirm(message)) {
        event.preventDefault();
        event.stopImmediatePropagation();
      }
    }, true);
  }

  // ---- Copy buttons (`data-copy` names the id of the element whose text is copied).
  function setUpCopy() {
    $$("[data-copy]").forEach(function (button) {
      button.addEventListener("click", function () {
        var source = document.getElementById(button.getAttribute("data-copy"));
        if (!source) { return; }
        var text = source.textContent.trim();
        var done = function () {
          button.textContent = "Copied";
          announce("Copied to the clipboard.", true);
          setTimeout(function () { button.textContent = "Copy"; }, 2500);
        };
        var fallback = function () {
          window.getSelection().selectAllChildren(source);
          announce("Copying is not available here: the secret is selected, press Ctrl+C or ⌘C.", false);
        };
        if (navigator.clipboard && navigator.clipboard.writeText) {
          navigator.clipboard.writeText(text).then(done, fallback);
        } else {
          fallback();
        }
      });
    });
  }

  // ---- Charts on canvas. series: [{values: [number|null], colour}], max is the top of the axis.
  function drawChart(canvas, series, options) {
    var ratio = window.devicePixelRatio || 1;
    var width = canvas.clientWidth || canvas.width;
    var height = canvas.clientHeight || canvas.height;
    if (canvas.width !== Math.round(width * ratio) || canvas.height !== Math.round(height * ratio)) {
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
    }
    var ctx = canvas.getContext("2d");
    if (!ctx) { return; }
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    var capacity = options.capacity;
    var max = options.max;
    if (max === undefined) {
      max = 0;
      series.forEach(function (s) {
        s.values.forEach(function (v) { if (isNumber(v) && v > max) { max = v; } });
      });
      max = niceCeiling(max);
    }
    var left = 4, right = width - 4, top = 18, bottom = height - 16;
    var text = cssVar("--chart-text");
    ctx.font = "11px " + cssVar("--font");
    ctx.lineWidth = 1;
    ctx.strokeStyle = cssVar("--chart-grid");
    ctx.beginPath();
    [0, 0.5, 1].forEach(function (f) {
      var y = Math.round(bottom - f * (bottom - top)) + 0.5;
      ctx.moveTo(left, y);
      ctx.lineTo(right, y);
    });
    ctx.stroke();
    ctx.fillStyle = text;
    ctx.textBaseline = "bottom";
    ctx.textAlign = "left";
    ctx.fillText((options.axis || formatNumber)(max), left, top - 2);
    ctx.textBaseline = "top";
    ctx.fillText(options.startLabel || "", left, bottom + 2);
    ctx.textAlign = "right";
    ctx.fillText(options.endLabel || "", right, bottom + 2);

    var step = (right - left) / Math.max(capacity - 1, 1);
    series.forEach(function (s) {
      var offset = capacity - s.values.length;
      ctx.strokeStyle = s.colour;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.beginPath();
      var drawing = false;
      s.values.forEach(function (v, i) {
        if (!isNumber(v)) { drawing = false; return; }
        var x = left + (offset + i) * step;
        var y = bottom - (max > 0 ? Math.min(v / max, 1) : 0) * (bottom - top);
        if (drawing) { ctx.lineTo(x, y); } else { ctx.moveTo(x, y); drawing = true; }
      });
      ctx.stroke();
    });
  }

  function niceCeiling(value) {
    if (!(value > 0)) { return 1; }
    var magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (value <= steps[i] * magnitude) { return steps[i] * magnitude; }
    }
    return 10 * magnitude;
  }

  // ---- Traffic page: live samples from the server.
  function setUpTraffic() {
    var state = document.getElementById("traffic-state");
    if (!state || !window.EventSource) { return; }
    var capacity = 60;
    var samples = [];
    var outputs = {
      rate: $("#traffic-rate"), p50: $("#traffic-p50"), p99: $("#traffic-p99"),
      errors: $("#traffic-errors"), cache: $("#traffic-cache"), limited: $("#traffic-limited")
    };
    var perSecond = function (v) { return fixed(v, 1); };
    var ms = function (v) { return fixed(v, 2); };
    var charts = [
      { id: "chart-rate", keys: ["rate"], format: perSecond, unit: "requests per second" },
      { id: "chart-latency", keys: ["p50", "p99"], format: ms, unit: "ms" },
      { id: "chart-errors", keys: ["errors"], format: perSecond, unit: "errors per second" },
      { id: "chart-cache", keys: ["cacheHitRate"], format: percent, axis: function () { return "100 %"; }, max: 1, unit: "" },
      { id: "chart-limited", keys: ["limited"], format: perSecond, unit: "refused per second" }
    ];
    charts.forEach(function (chart) {
      chart.canvas = document.getElementById(chart.id);
      chart.baseLabel = chart.canvas ? chart.canvas.getAttribute("aria-label") : "";
    });

    function setState(name, label) {
      state.className = "state state-" + name;
      state.textContent = label;
    }

    function redraw() {
      var colours = [cssVar("--chart-1"), cssVar("--chart-2")];
      var last = samples[samples.length - 1];
      charts.forEach(function (chart) {
        if (!chart.canvas) { return; }
        var series = chart.keys.map(function (key, i) {
          return { colour: colours[i], values: samples.map(function (s) { return s.overall ? s.overall[key] : null; }) };
        });
        drawChart(chart.canvas, series, {
          capacity: capacity, max: chart.max, format: chart.format, axis: chart.axis,
          startLabel: samples.length ? formatTime(samples[0].at, true) : "", endLabel: last ? formatTime(last.at, true) : ""
        });
        if (last && last.overall) {
          var now = chart.keys.map(function (key) {
            var v = last.overall[key];
            var shown = chart.format(v) + (chart.unit ? " " + chart.unit : "");
            return chart.keys.length > 1 ? key + " " + shown : shown;
          }).join(", ");
          chart.canvas.setAttribute("aria-label", chart.baseLabel + " Latest: " + now + ".");
        }
      });
    }

    function update(sample) {
      var o = sample.overall || {};
      outputs.rate.textContent = fixed(o.rate, 1);
      outputs.p50.textContent = ms(o.p50);
      outputs.p99.textContent = ms(o.p99);
      outputs.errors.textContent = fixed(o.errors, 1);
      outputs.cache.textContent = percent(o.cacheHitRate);
      outputs.limited.textContent = fixed(o.limited, 1);
      var plugins = sample.plugins || {};
      $$("#traffic-plugins tr[data-plugin]").forEach(function (row) {
        var s = plugins[row.getAttribute("data-plugin")] || {};
        $$("[data-field]", row).forEach(function (cell) {
          var field = cell.getAttribute("data-field");
          var v = s[field];
          if (field === "cacheHitRate") { cell.textContent = percent(v); }
          else if (field === "p50" || field === "p99") { cell.textContent = ms(v); }
          else { cell.textContent = fixed(v, 1); }
        });
      });
    }

    var source = new EventSource("/admin/live");
    source.onopen = function () { setState("live", "live"); };
    source.onerror = function () {
      setState("reconnecting", source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…");
    };
    // The stream names its events `traffic` (/v1/admin/metrics/live sends the same).
    source.addEventListener("traffic", function (event) {
      var sample;
      try { sample = JSON.parse(event.data); } catch (e) { return; }
      setState("live", "live");
      samples.push(sample);
      if (samples.length > capacity) { samples.shift(); }
      update(sample);
      redraw();
    });
    watchResize(redraw);
    redraw();
  }

  function watchResize(redraw) {
    var pending = false;
    var schedule = function () {
      if (pending) { return; }
      pending = true;
      window.requestAnimationFrame(function () { pending = false; redraw(); });
    };
    window.addEventListener("resize", schedule);
    if (window.matchMedia) {
      var dark = window.matchMedia("(prefers-color-scheme: dark)");
      if (dark.addEventListener) { dark.addEventListener("change", schedule); }
    }
  }

  // ---- Plugin views: series charts from data-points (JSON [[epochSeconds, value], ...]).
  function setUpSeriesCharts() {
    var canvases = $$("canvas.series-chart");
    if (!canvases.length) { return; }
    var parsed = canvases.map(function (canvas) {
      var points = [];
      try { points = JSON.parse(canvas.getAttribute("data-points") || "[]"); } catch (e) { points = []; }
      points = points.filter(function (p) { return Array.isArray(p) && p.length >= 2; });
      var text = document.querySelector('[data-series-for="' + canvas.id + '"]');
      var lastPoint = points[points.length - 1];
      var summary = lastPoint ? "Latest value: " + formatNumber(lastPoint[1]) + " at " + formatTime(lastPoint[0]) +
        " (" + points.length + " points since " + formatTime(points[0][0]) + ")." : "No data yet.";
      if (text) { text.textContent = summary; }
      var section = canvas.closest("section");
      var heading = section && section.querySelector("h2");
      var label = (canvas.getAttribute("aria-label") || "").trim() || (heading ? heading.textContent.trim() : "Chart");
      canvas.setAttribute("aria-label", label + ". " + summary);
      return { canvas: canvas, points: points };
    });
    var redraw = function () {
      parsed.forEach(function (item) {
        var p = item.points;
        drawChart(item.canvas, [{ colour: cssVar("--chart-1"), values: p.map(function (x) { return x[1]; }) }], {
          capacity: Math.max(p.length, 2), format: formatNumber,
          startLabel: p.length ? formatTime(p[0][0]) : "", endLabel: p.length ? formatTime(p[p.length - 1][0]) : ""
        });
      });
    };
    watchResize(redraw);
    redraw();
  }

  function formatNumber(v) {
    if (!isNumber(v)) { return "—"; }
    return Math.abs(v) >= 100 || Number.isInteger(v) ? Math.round(v).toLocaleString() : v.toFixed(2);
  }

  function formatTime(epochSeconds, withSeconds) {
    var d = new Date(epochSeconds * 1000);
    var parts = withSeconds ? { hour: "2-digit", minute: "2-digit", second: "2-digit" } : { hour: "2-digit", minute: "2-digit" };
    return typeof epochSeconds !== "number" || isNaN(d.getTime()) ? "" : d.toLocaleTimeString([], parts);
  }

  // ---- Operations: filter and explorer.
  function setUpOperations() {
    var filter = document.getElementById("operations-filter");
    var operations = $$("details.operation");
    var count = document.getElementById("operations-count");
    if (filter) {
      var apply = function () {
        var words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
        var shown = 0;
        operations.forEach(function (op) {
          var form = $("form.explorer", op);
          var summary = $(".op-summary", op);
          var haystack = [op.getAttribute("data-name"), form && form.getAttribute("data-path"),
            summary && summary.textContent].join(" ").toLowerCase();
          var match = words.every(function (w) { return haystack.indexOf(w) !== -1; });
          op.hidden = !match;
          if (match) { shown++; }
        });
        if (count) { count.textContent = words.length ? shown + " of " + operations.length + " shown" : ""; }
      };
      filter.addEventListener("input", apply);
      if (filter.value) { apply(); }
    }
    $$("form.explorer").forEach(function (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        call(form);
      });
    });
  }

  function call(form) {
    var method = form.getAttribute("data-method");
    var path = form.getAttribute("data-path");
    var query = [];
    $$("input[data-in]", form).forEach(function (input) {
      var value = input.value;
      if (input.getAttribute("data-in") === "path") {
        path = path.split("{" + input.name + "}").join(encodeURIComponent(value));
      } else if (value !== "") {
        query.push(encodeURIComponent(input.name) + "=" + encodeURIComponent(value));
      }
    });
    if (query.length) { path += (path.indexOf("?") === -1 ? "?" : "&") + query.join("&"); }
    var bodyField = form.elements.namedItem("body");
    var body = bodyField && bodyField.value.trim() !== "" ? bodyField.value : null;
    var reply = $("pre.reply", form);
    var button = $("button[type=submit]", form);
    reply.className = "reply";
    reply.textContent = method + " " + path + " …";
    if (button) { button.disabled = true; }
    fetch("/admin/operations/call", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
      body: JSON.stringify({ method: method, path: path, body: body })
    }).then(function (response) {
      return response.text().then(function (text) {
        var result;
        try { result = JSON.parse(text); } catch (e) { result = null; }
        if (!response.ok || !result || typeof result.status !== "number") {
          throw new Error("The console refused the call (HTTP " + response.status + ")" + (text ? ": " + text : "."));
        }
        return result;
      });
    }).then(function (result) {
      var lines = [method + " " + path, "", "HTTP " + result.status];
      (result.headers || []).forEach(function (h) { lines.push(h[0] + ": " + h[1]); });
      lines.push("");
      lines.push(prettyBody(result.body));
      reply.textContent = lines.join("\n");
      reply.className = "reply " + (result.status < 400 ? "ok" : "error");
    }).catch(function (error) {
      reply.textContent = error.message || String(error);
      reply.className = "reply error";
    }).then(function () {
      if (button) { button.disabled = false; }
    });
  }

  function prettyBody(body) {
    if (typeof body !== "string" || body === "") { return body ? String(body) : "(empty body)"; }
    try { return JSON.stringify(JSON.parse(body), null, 2); } catch (e) { return body; }
  }

  // ---- Configuration editor: line gutter and jumping to an error's line.
  function setUpConfiguration() {
    var textarea = document.getElementById("config-text");
    if (!textarea) { return; }
    var editor = textarea.parentNode;
    var gutter = null;
    if (editor && editor.classList.contains("editor")) {
      gutter = document.createElement("pre");
      gutter.className = "gutter";
      gutter.setAttribute("aria-hidden", "true");
      editor.insertBefore(gutter, textarea);
      var lineCount = 0;
      var renumber = function () {
        var lines = textarea.value.split("\n").length;
        if (lines === lineCount) { return; }
        lineCount = lines;
        var numbers = [];
        for (var i = 1; i <= lines; i++) { numbers.push(i); }
        gutter.textContent = numbers.join("\n") + "\n\n";
      };
      renumber();
      textarea.addEventListener("input", renumber);
      textarea.addEventListener("scroll", function () { gutter.scrollTop = textarea.scrollTop; });
    }
    var errors = document.getElementById("config-errors");
    if (!errors) { return; }
    errors.addEventListener("click", function (event) {
      var item = event.target.closest("li[data-line]");
      if (item) { goToLine(textarea, parseInt(item.getAttribute("data-line"), 10)); }
    });
  }

  function goToLine(textarea, line) {
    if (!(line > 0)) { return; }
    var lines = textarea.value.split("\n");
    var offset = 0;
    for (var i = 0; i < Math.min(line - 1, lines.length); i++) { offset += lines[i].length + 1; }
    textarea.focus();
    textarea.setSelectionRange(offset, offset);
    var lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 20;
    textarea.scrollTop = Math.max(0, (line - 1) * lineHeight - textarea.clientHeight / 3);
    textarea.scrollIntoView({ block: "nearest" });
  }

  // ---- Plugin views that ask to be refreshed, only while visible and not being edited.
  function setUpRefresh() {
    var holder = $("[data-refresh]");
    if (!holder) { return; }
    var seconds = parseInt(holder.getAttribute("data-refresh"), 10);
    if (!(seconds > 0)) { return; }
    var busy = function () {
      var active = document.activeElement;
      return active && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
    };
    setInterval(function () {
      if (document.visibilityState === "visible" && !busy()) { window.location.reload(); }
    }, Math.max(seconds, 2) * 1000);
  }

  function start() {
    [setUpMenu, setUpConfirm, setUpCopy, setUpTraffic, setUpSeriesCharts, setUpOperations, setUpConfiguration, setUpRefresh]
      .forEach(function (setUp) { setUp(); });
  }

  if (document.readyState === "loading") { document.addEventListener("DOMContentLoaded", start); } else { start(); }
}());
