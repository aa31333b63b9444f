// stepwell console: live refresh and countdowns. The pages read fine
// without this script; with it, the page's <main> is fetched again every
// few seconds (while the tab is visible and no form field has focus) and
// swapped in, and lease and deadline countdowns tick each second.
(function () {
  "use strict";

  function tick() {
    var now = Date.now();
    document.querySelectorAll("time.countdown[data-at]").forEach(function (el) {
      var left = Number(el.getAttribute("data-at")) - now;
      el.textContent = (left >= 0 ? "in " : "") + span(Math.abs(left)) + (left < 0 ? " ago" : "");
    });
  }

  function span(ms) {
    var s = Math.floor(ms / 1000);
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " m " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " m";
  }

  function busy() {
    var el = document.activeElement;
    return el && /^(INPUT|SELECT|TEXTAREA)$/.test(el.tagName);
  }

  function refresh(main, status) {
    if (document.visibilityState !== "visible" || busy()) return;
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok || response.redirected) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html").getElementById("main");
        if (!fresh) return;
        // Keep what the reader opened or closed in the JSON viewer.
        var before = Array.prototype.map.call(main.querySelectorAll("details"), function (d) { return d.open; });
        main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
        main.querySelectorAll("details").forEach(function (d, i) { if (i < before.length) d.open = before[i]; });
        tick();
        status.textContent = "Updated " + new Date().toLocaleTimeString();
      })
      .catch(function () { status.textContent = "Live refresh paused: the sidecar did not answer."; });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var main = document.getElementById("main");
    var status = document.getElementById("live-status");
    tick();
    setInterval(tick, 1000);
    var every = main && Number(main.getAttribute("data-live"));
    if (every > 0 && status) setInterval(function () { refresh(main, status); }, every);
  });
})();
