// Draws every <div class="chart" data-chart="KIND" data-source="ID"> from the JSON in <script id="ID"
// type="application/json"> with Apache ECharts (vendor/echarts). Each drawn chart gets data-points (how many
// data points it drew), which the browser tests read. No inline code, no eval: works under default-src 'self'.
"use strict";
(function () {
  var dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  var SEVERITY_COLOURS = { critical: "#9b1111", error: "#e0503f", warning: "#f2b53a", info: "#6ea8dc" };
  var pad = function (n) { return String(n).padStart(2, "0"); };

  function localText(ms) {
    var d = new Date(ms);
    return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + pad(d.getHours()) +
      ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }
  function utcText(ms) { return new Date(ms).toISOString().replace("T", " ").replace(".000Z", "Z"); }

  function bytes(n) {
    if (n === null || n === undefined) { return "–"; }
    var units = [["TiB", 1099511627776], ["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(n) >= units[i][1]) { return (n / units[i][1]).toPrecision(3) + " " + units[i][0]; }
    }
    return n + " B";
  }
  function seconds(s) {
    if (s < 1) { return (s * 1000).toPrecision(3) + " ms"; }
    return s.toPrecision(3) + " s";
  }
  function escapeText(text) {
    return String(text).replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }[c];
    });
  }

  function base() {
    return {
      backgroundColor: "transparent", animation: false,
      textStyle: { color: dark ? "#d5dbe2" : "#1d232b" },
      grid: { left: 56, right: 56, top: 40, bottom: 64, containLabel: false },
      tooltip: { confine: true },
      legend: { top: 0, type: "scroll" },
    };
  }
  function timeAxis() {
    return { type: "time", axisLabel: { hideOverlap: true, formatter: { hour: "{HH}:{mm}", minute: "{HH}:{mm}",
      second: "{HH}:{mm}:{ss}", day: "{MM}-{dd}" } } };
  }
  function zoom() { return [{ type: "inside" }, { type: "slider", height: 18, bottom: 8 }]; }

  function severityBars(data) {
    var names = Object.keys(data.series);
    var points = 0;
    var series = names.map(function (name) {
      var values = data.series[name].map(function (count, i) { points += count ? 1 : 0; return [data.bins[i], count]; });
      return { name: name, type: "bar", stack: "severity", data: values, barMaxWidth: 28,
               itemStyle: { color: SEVERITY_COLOURS[name] } };
    });
    var option = base();
    option.tooltip.trigger = "axis";
    option.tooltip.formatter = function (items) {
      var lines = ["<b>" + escapeText(localText(items[0].value[0])) + "</b> (" + escapeText(utcText(items[0].value[0])) + ")"];
      items.forEach(function (it) { if (it.value[1]) { lines.push(escapeText(it.seriesName) + ": " + it.value[1]); } });
      return lines.join("<br>");
    };
    option.xAxis = timeAxis();
    option.yAxis = { type: "value", minInterval: 1, name: "opened" };
    option.series = series;
    return { option: option, points: points };
  }

  function heatmap(data) {
    var max = 1;
    data.cells.forEach(function (c) { max = Math.max(max, c[2]); });
    var option = base();
    option.grid.left = 76;
    option.grid.bottom = 96;
    option.xAxis = { type: "category", data: data.bins.map(localText), splitArea: { show: true },
                     axisLabel: { hideOverlap: true } };
    option.yAxis = { type: "category", data: data.buckets, name: "gap", splitArea: { show: true } };
    option.visualMap = { min: 0, max: max, calculable: true, orient: "horizontal", left: "center", bottom: 30,
                         itemHeight: 120, inRange: { color: dark ? ["#1b2a3a", "#2f7fc1", "#f2d33a", "#ff5a36"]
                                                                  : ["#eef5fb", "#6ea8dc", "#f2b53a", "#b3122e"] },
                         seriesIndex: 0 };
    option.tooltip.formatter = function (p) {
      if (p.seriesType === "heatmap") {
        return escapeText(localText(data.bins[p.value[0]])) + "<br>" + escapeText(data.buckets[p.value[1]]) +
          ": " + p.value[2] + " gaps";
      }
      if (p.seriesName === "stall") { return "stall " + escapeText(seconds(p.data.gap_s)) + "<br>" + escapeText(p.data.id); }
      return escapeText(p.name || "");
    };
    var stalls = data.stalls.map(function (s) { return { value: [s.bin, s.bucket], gap_s: s.gap_s, id: s.id }; });
    var lines = data.violations.map(function (v) {
      return { xAxis: v.bin, name: v.rule + " (" + v.severity + ")",
               lineStyle: { color: SEVERITY_COLOURS[v.severity] || "#888", width: 2 } };
    });
    option.series = [
      { name: "gaps", type: "heatmap", data: data.cells, emphasis: { itemStyle: { borderColor: "#000" } } },
      { name: "stall", type: "scatter", data: stalls, symbol: "triangle", symbolSize: 9,
        itemStyle: { color: dark ? "#ffffff" : "#18212c" }, z: 5,
        markLine: { symbol: "none", silent: false, data: lines,
                    label: { show: false } } },
    ];
    option.legend.data = ["stall"];
    return { option: option, points: data.cells.length };
  }

  function memory(data) {
    var option = base();
    option.grid.right = 76;
    option.tooltip.trigger = "axis";
    option.tooltip.formatter = function (items) {
      var lines = ["<b>" + escapeText(localText(items[0].value[0])) + "</b> (" + escapeText(utcText(items[0].value[0])) + ")"];
      items.forEach(function (it) {
        var v = it.value[1];
        var text = it.seriesName === "FR" ? Number(v).toFixed(3) : (it.seriesType === "scatter" ? it.data.text : bytes(v));
        lines.push(escapeText(it.seriesName) + ": " + escapeText(text));
      });
      return lines.join("<br>");
    };
    option.xAxis = timeAxis();
    option.yAxis = [
      { type: "value", name: "FR", min: 0, max: 1 },
      { type: "value", name: "bytes", axisLabel: { formatter: bytes }, splitLine: { show: false } },
    ];
    var fr = [], free = [], largest = [];
    data.points.forEach(function (p) {
      if (p.fr !== null && p.fr !== undefined) { fr.push([p.t, p.fr]); }
      if (p.free !== null && p.free !== undefined) { free.push([p.t, p.free]); }
      if (p.largest !== null && p.largest !== undefined) { largest.push([p.t, p.largest]); }
    });
    var kinds = {};
    data.markers.forEach(function (m) { (kinds[m.kind] = kinds[m.kind] || []).push({ value: [m.t, 1], text: m.text, id: m.id }); });
    var markerStyle = { "OOM": ["pin", "#b3122e"], "allocator retry": ["diamond", "#8a5cc2"], "stall": ["triangle", "#e07b00"] };
    option.series = [
      { name: "FR", type: "line", data: fr, showSymbol: fr.length < 60, step: "end", yAxisIndex: 0,
        lineStyle: { width: 2 },
        markLine: { symbol: "none", silent: true, data: data.thresholds.map(function (t, i) {
          return { yAxis: t, name: i === 0 ? "healthy < " + t : "stalls > " + t,
                   lineStyle: { type: "dashed", color: i === 0 ? "#2e9d57" : "#d33a2c" } };
        }), label: { formatter: "{b}", position: "insideEndTop" } } },
      { name: "largest free block", type: "line", data: largest, yAxisIndex: 1, showSymbol: false, step: "end" },
      { name: "free", type: "line", data: free, yAxisIndex: 1, showSymbol: false, step: "end",
        lineStyle: { type: "dotted" } },
    ];
    Object.keys(kinds).forEach(function (kind) {
      var style = markerStyle[kind] || ["circle", "#888"];
      option.series.push({ name: kind, type: "scatter", data: kinds[kind], yAxisIndex: 0, symbol: style[0],
                           symbolSize: 14, itemStyle: { color: style[1] }, z: 5 });
    });
    option.dataZoom = zoom();
    return { option: option, points: fr.length + free.length + largest.length + data.markers.length };
  }

  function evidence(data) {
    var option = base();
    option.grid.left = 130;
    option.grid.top = 16;
    option.xAxis = timeAxis();
    option.xAxis.scale = true;
    option.yAxis = { type: "category", data: data.kinds };
    option.tooltip.formatter = function (p) {
      return "<b>" + escapeText(p.data.kind) + "</b> " + escapeText(localText(p.value[0])) + "<br>" +
        escapeText(p.data.host + (p.data.gpu === null ? "" : " GPU " + p.data.gpu)) + "<br>" + escapeText(p.data.id);
    };
    option.series = [{ name: "evidence", type: "scatter", symbolSize: 11,
                       data: data.points.map(function (p) {
                         return { value: [p.t, p.row], kind: p.kind, host: p.host, gpu: p.gpu, id: p.id };
                       }) }];
    option.dataZoom = [{ type: "inside" }];
    delete option.legend;
    return { option: option, points: data.points.length };
  }

  function attribution(data) {
    var option = base();
    option.grid.left = 110;
    option.tooltip.trigger = "axis";
    option.tooltip.axisPointer = { type: "shadow" };
    option.tooltip.formatter = function (items) {
      var stall = data.stalls[items[0].dataIndex];
      var lines = ["<b>" + escapeText(stall.id) + "</b> gap " + escapeText(seconds(stall.gap_ms / 1000))];
      items.forEach(function (it) { lines.push(escapeText(it.seriesName) + ": " + escapeText(seconds(it.value / 1000))); });
      return lines.join("<br>");
    };
    option.xAxis = { type: "value", name: "ms" };
    option.yAxis = { type: "category", data: data.stalls.map(function (s) { return localText(s.t); }) };
    var points = 0;
    option.series = data.layers.map(function (layer) {
      points += data.series[layer].length;
      return { name: layer, type: "bar", stack: "layers", data: data.series[layer], barMaxWidth: 22 };
    });
    return { option: option, points: points };
  }

  var RENDERERS = { "severity-bars": severityBars, heatmap: heatmap, memory: memory, evidence: evidence,
                    attribution: attribution };

  function draw(node) {
    var source = document.getElementById(node.getAttribute("data-source"));
    var render = RENDERERS[node.getAttribute("data-chart")];
    if (!source || !render || typeof echarts === "undefined") { return; }
    var built = render(JSON.parse(source.textContent));
    var chart = echarts.init(node, dark ? "dark" : null, { renderer: "canvas" });
    chart.setOption(built.option);
    node.setAttribute("data-points", String(built.points));
    node.classList.add("drawn");
    window.addEventListener("resize", function () { chart.resize(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".chart[data-chart]").forEach(draw);
  });
})();
