// gpuslo UI enhancements; every page works without them (CSP: script-src 'self', no inline code, no eval).
// 1. <time datetime="…Z"> shows the browser's local time; the UTC text stays in the tooltip.
// 2. Every cell of a data table gets its column name in data-label, which the narrow (card) layout shows.
"use strict";
(function () {
  var pad = function (n, width) { return String(n).padStart(width || 2, "0"); };

  function offsetText(date) {
    var minutes = -date.getTimezoneOffset();
    var sign = minutes >= 0 ? "+" : "−";
    minutes = Math.abs(minutes);
    return "UTC" + sign + pad(Math.floor(minutes / 60)) + ":" + pad(minutes % 60);
  }

  function localTimes(root) {
    root.querySelectorAll("time[datetime]").forEach(function (node) {
      var date = new Date(node.getAttribute("datetime"));
      if (isNaN(date.getTime())) { return; }
      var micro = (node.getAttribute("datetime").match(/\.(\d+)/) || [null, ""])[1];
      var fraction = micro ? "." + micro.slice(0, 3) : "";
      node.textContent = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
        pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds()) + fraction;
      node.title = node.getAttribute("datetime").replace("T", " ") + " (shown in " + offsetText(date) + ")";
      node.classList.add("local");
    });
  }

  function cardLabels(root) {
    root.querySelectorAll("table.data").forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.textContent.trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (row) {
        Array.prototype.forEach.call(row.children, function (cell, index) {
          if (heads[index] && !cell.hasAttribute("data-label")) { cell.setAttribute("data-label", heads[index]); }
        });
      });
      table.classList.add("labelled");
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    cardLabels(document);
  });
})();
