// jobplane UI: the live log, lease countdowns and inline validation of the
// request form. Every text that comes from a run goes in with textContent.
(function () {
  "use strict";

  // ---- live log ----
  function startLog(ol) {
    var src = ol.getAttribute("data-stream");
    var status = document.getElementById("log-status");
    var follow = document.getElementById("log-follow");
    var last = 0; // the id of the last line shown: never show a line twice
    var es = null;
    var ended = false;
    var failures = 0;
    function say(t) { if (status) status.textContent = t; }
    function open() {
      // A new EventSource resumes after the last line we have; one that
      // reconnects by itself sends Last-Event-ID, which is the same.
      es = new EventSource(src + (last > 0 ? "?after=" + last : ""));
      es.addEventListener("open", function () { say("live"); });
      es.addEventListener("line", function (ev) {
        var l;
        try { l = JSON.parse(ev.data); } catch (e) { return; }
        if (l.id <= last) return;
        last = l.id;
        var li = document.createElement("li");
        li.className = l.stream === "stderr" ? "stderr" : (l.stream === "system" ? "system" : "stdout");
        li.setAttribute("data-id", String(l.id));
        li.setAttribute("data-stream", l.stream);
        li.textContent = l.text;
        ol.appendChild(li);
        if (!follow || follow.checked) ol.scrollTop = ol.scrollHeight;
      });
      es.addEventListener("end", function (ev) {
        ended = true;
        es.close();
        var st = "";
        try { st = JSON.parse(ev.data); } catch (e) { st = ""; }
        ol.setAttribute("data-ended", "true");
        say("run ended" + (st ? " (" + st + ")" : "") + "; the log is complete");
      });
      es.addEventListener("open", function () { failures = 0; });
      es.addEventListener("error", function () {
        if (ended) return;
        say("reconnecting…");
        if (es.readyState === EventSource.CLOSED) {
          // The server refused the stream (signed out, say): back off, up
          // to 30 s between tries.
          failures++;
          setTimeout(function () { if (!ended) open(); }, Math.min(30000, 1000 * Math.pow(2, failures - 1)));
        }
      });
    }
    // Drop the connection and resume, as after a network failure (also
    // what the browser tests use to prove nothing is lost or repeated).
    ol.reconnectLog = function () { if (es) es.close(); say("reconnecting…"); open(); };
    open();
  }

  // ---- countdowns ----
  function tick() {
    var now = Date.now();
    document.querySelectorAll("time.countdown").forEach(function (t) {
      var at = Date.parse(t.getAttribute("datetime"));
      if (isNaN(at)) return;
      var s = Math.round((at - now) / 1000);
      t.textContent = s > 0 ? (s >= 60 ? Math.floor(s / 60) + "m " + (s % 60) + "s" : s + "s") : "expired";
    });
  }

  // ---- inline validation ----
  function validate(input) {
    var err = document.getElementById(input.id + "-err");
    var msg = "";
    var pattern = input.getAttribute("data-pattern");
    input.setCustomValidity("");
    if (pattern && input.value !== "") {
      var re = null;
      try { re = new RegExp(pattern, "u"); } catch (e) { re = null; }
      if (re && !re.test(input.value)) msg = "Must match " + pattern;
    }
    if (!msg && !input.checkValidity()) msg = input.validationMessage;
    if (msg) input.setCustomValidity(msg);
    if (err) err.textContent = msg;
    if (msg) input.setAttribute("aria-invalid", "true"); else input.removeAttribute("aria-invalid");
    return !msg;
  }
  function setupForm(form) {
    var inputs = form.querySelectorAll("input[id^='p-'], select[id^='p-'], textarea[id^='p-']");
    inputs.forEach(function (i) {
      i.addEventListener("input", function () { validate(i); });
      i.addEventListener("blur", function () { validate(i); });
    });
    form.addEventListener("submit", function (ev) {
      var ok = true, first = null;
      inputs.forEach(function (i) { if (!validate(i)) { ok = false; if (!first) first = i; } });
      if (!ok) { ev.preventDefault(); first.focus(); }
    });
  }

  function init() {
    var log = document.getElementById("log");
    if (log) startLog(log);
    if (document.querySelector("time.countdown")) { tick(); setInterval(tick, 1000); }
    document.querySelectorAll("form[data-validate]").forEach(setupForm);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
