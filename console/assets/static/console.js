// The console's only script: live tables over EventSource, actions over
// fetch with the session's CSRF token, the as-of slider of a timeline.
"use strict";
(function () {
  var prefix = document.querySelector('meta[name="prefix"]').content;
  var csrf = document.querySelector('meta[name="csrf-token"]').content;
  var page = document.body.dataset.page;

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function cell(tr, text, cls) { var td = el("td", cls ? { "class": cls } : {}, text); tr.appendChild(td); return td; }
  function notice(text, ok) {
    var n = document.getElementById("notice");
    n.textContent = text; n.hidden = !text; n.className = ok ? "ok" : "error";
  }
  function confirmAction(text) {
    var d = document.getElementById("confirm");
    document.getElementById("confirm-text").textContent = text;
    return new Promise(function (resolve) {
      d.addEventListener("close", function () { resolve(d.returnValue === "ok"); }, { once: true });
      d.returnValue = "";
      d.showModal();
      document.getElementById("confirm-cancel").focus();
    });
  }
  function post(path, fields) {
    var body = new URLSearchParams(fields);
    return fetch(prefix + path, {
      method: "POST", body: body, credentials: "same-origin",
      headers: { "X-CSRF-Token": csrf, "Accept": "application/json" }
    }).then(function (r) {
      return r.json().catch(function () { return {}; }).then(function (b) {
        return { ok: r.ok && !b.refused, body: b.refused || b };
      });
    });
  }
  // live keeps render fed from the SSE stream at path; focus stays on the
  // control (by data-key and data-op) that had it.
  function live(path, render) {
    var src = new EventSource(prefix + path);
    src.onmessage = function (m) {
      var a = document.activeElement, key = a && a.dataset ? a.dataset.key : null, op = a && a.dataset ? a.dataset.op : null;
      render(JSON.parse(m.data));
      if (key && op) {
        var again = document.querySelector('[data-key="' + CSS.escape(key) + '"][data-op="' + op + '"]');
        if (again) { again.focus(); }
      }
    };
    window.addEventListener("pagehide", function () { src.close(); });
    return src;
  }
  function num(v) { return v === undefined || v === null ? "" : String(v); }
  function secs(v) { return v ? v.toFixed(1) : "0"; }

  var history = {};
  function sparkline(key, value) {
    var h = history[key] || (history[key] = []);
    h.push(value);
    if (h.length > 60) { h.shift(); }
    var max = Math.max.apply(null, h.concat([1])), w = 80, ht = 20;
    var pts = h.map(function (v, i) {
      var x = h.length === 1 ? w : (i * w) / (h.length - 1);
      return x.toFixed(1) + "," + (ht - (v * (ht - 2)) / max - 1).toFixed(1);
    }).join(" ");
    var ns = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 " + w + " " + ht);
    svg.setAttribute("width", w); svg.setAttribute("height", ht);
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", "lag over the last " + h.length + " updates, now " + value + " events");
    var line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts); line.setAttribute("fill", "none");
    line.setAttribute("stroke", "currentColor"); line.setAttribute("stroke-width", "1.5");
    svg.appendChild(line);
    return svg;
  }

  var ops = {
    restart: "Restart {s}: it retries the event that failed, from its cursor.",
    skip: "Skip the event after the cursor of {s}? The shard will never handle it.",
    disable: "Disable {s}? Passes leave it alone until it is enabled.",
    enable: "Enable {s}? Passes resume from its cursor."
  };
  function consumers(list) {
    var tb = document.querySelector("#consumers tbody");
    tb.replaceChildren();
    if (!list.length) { var tr0 = el("tr"); cell(tr0, "No consumer shards yet.").colSpan = 11; tb.appendChild(tr0); }
    list.forEach(function (s) {
      var key = s.name + "/" + s.instanceId, tr = el("tr", { "data-key": key, "data-status": s.status, "data-lag": String(s.lagEvents) });
      cell(tr, s.name); cell(tr, s.instanceId);
      cell(tr, s.status + (s.liveness ? " (" + s.liveness + ")" : ""), "status status-" + s.status);
      cell(tr, num(s.cursor), "n"); cell(tr, num(s.head), "n"); cell(tr, num(s.lagEvents), "n lag");
      cell(tr, secs(s.lagSeconds), "n"); cell(tr, "").appendChild(sparkline(key, s.lagEvents));
      cell(tr, s.gapWaitSeconds ? secs(s.gapWaitSeconds) + (s.gapBackends.length ? " (pids " + s.gapBackends.join(", ") + ")" : "") : "", "n");
      cell(tr, s.lastError, "err");
      var td = cell(tr, "", "actions");
      Object.keys(ops).forEach(function (op) {
        var b = el("button", { type: "button", "data-key": key, "data-op": op, "aria-label": op + " " + key }, op);
        b.addEventListener("click", function () {
          confirmAction(ops[op].replace("{s}", key)).then(function (yes) {
            if (!yes) { return; }
            post("/consumers/" + op, { name: s.name, instance: s.instanceId }).then(function (r) {
              notice(r.ok ? key + ": " + op + " done, now " + r.body.data.status + "." : key + ": " + op + " refused: " + (r.body.detail || r.body.code), r.ok);
            });
          });
        });
        td.appendChild(b);
      });
      tb.appendChild(tr);
    });
  }

  function projections(list) {
    var tb = document.querySelector("#projections tbody");
    tb.replaceChildren();
    list.forEach(function (p) {
      var tr = el("tr", { "data-key": p.name, "data-status": p.status });
      if (p.rebuild) { tr.dataset.rebuild = p.rebuild.running ? "running" : p.rebuild.error ? "failed" : String(p.rebuild.percent); }
      cell(tr, p.name); cell(tr, p.kind); cell(tr, p.status, "status status-" + p.status);
      cell(tr, num(p.cursor), "n"); cell(tr, num(p.head), "n"); cell(tr, num(p.lag), "n"); cell(tr, secs(p.lagSeconds), "n");
      cell(tr, p.lastRebuildAt ? new Date(p.lastRebuildAt).toLocaleString() : "never");
      var td = cell(tr, "", "progress");
      if (p.rebuild) {
        var pr = el("progress", { max: "100", value: String(p.rebuild.percent), "aria-label": "rebuild of " + p.name });
        td.appendChild(pr);
        td.appendChild(el("span", { "class": "percent" }, p.rebuild.percent + " %" + (p.rebuild.running ? "" : p.rebuild.error ? " failed" : " done")));
      }
      cell(tr, (p.rebuild && p.rebuild.error) || p.lastError, "err");
      var b = el("button", { type: "button", "data-key": p.name, "data-op": "rebuild", "aria-label": "rebuild " + p.name }, "rebuild");
      b.addEventListener("click", function () {
        confirmAction("Rebuild " + p.name + " from the stored events?").then(function (yes) {
          if (!yes) { return; }
          post("/projections/rebuild", { name: p.name }).then(function (r) {
            notice(r.ok ? p.name + ": rebuild started." : p.name + ": rebuild refused: " + (r.body.detail || r.body.code), r.ok);
          });
        });
      });
      cell(tr, "", "actions").appendChild(b);
      tb.appendChild(tr);
    });
  }

  function events() {
    var form = document.getElementById("filter"), src = null, state = document.getElementById("tail-state");
    var tb = document.querySelector("#events tbody");
    function connect() {
      if (src) { src.close(); }
      tb.replaceChildren();
      var q = new URLSearchParams(new FormData(form));
      src = new EventSource(prefix + "/events/live?" + q.toString());
      src.onopen = function () { state.textContent = "Following the event log."; };
      src.onerror = function () { state.textContent = "Reconnecting…"; };
      src.onmessage = function (m) {
        var e = JSON.parse(m.data), tr = el("tr", { "data-id": String(e.id) });
        cell(tr, e.id, "n"); cell(tr, new Date(e.createdAt).toLocaleString()); cell(tr, e.type);
        var a = el("a", { href: prefix + "/aggregates/" + encodeURIComponent(e.aggregateType) + "/" + e.aggregateId }, e.aggregateType + " " + e.aggregateId.slice(0, 8));
        cell(tr, "").appendChild(a);
        cell(tr, e.version, "n"); cell(tr, JSON.stringify(e.payload), "payload");
        tb.insertBefore(tr, tb.firstChild);
        while (tb.children.length > 200) { tb.removeChild(tb.lastChild); }
      };
    }
    form.addEventListener("submit", function (ev) { ev.preventDefault(); connect(); });
    window.addEventListener("pagehide", function () { if (src) { src.close(); } });
    connect();
  }

  function merge(state, payload) {
    var out = Object.assign({}, state);
    if (payload && typeof payload === "object" && !Array.isArray(payload)) { Object.assign(out, payload); }
    return out;
  }
  function timeline() {
    var b = document.body.dataset;
    fetch(prefix + "/aggregates/" + encodeURIComponent(b.type) + "/" + encodeURIComponent(b.id) + "/data", { headers: { Accept: "application/json" } })
      .then(function (r) { return r.json().then(function (j) { return { ok: r.ok, body: j }; }); })
      .then(function (r) {
        if (!r.ok) { notice(r.body.detail || r.body.code); return; }
        var evs = r.body.data.events, states = [{}];
        evs.forEach(function (e, i) { states.push(merge(states[i], e.payload)); });
        var tb = document.querySelector("#timeline tbody");
        evs.forEach(function (e) {
          var tr = el("tr");
          cell(tr, e.version, "n"); cell(tr, e.id, "n"); cell(tr, new Date(e.createdAt).toLocaleString()); cell(tr, e.type); cell(tr, e.createdBy);
          tb.appendChild(tr);
        });
        var slider = document.getElementById("asof");
        slider.max = String(evs.length); slider.value = String(evs.length);
        function show() {
          var v = Number(slider.value), e = evs[v - 1], before = states[v - 1], after = states[v];
          document.getElementById("asof-value").textContent = v + " of " + evs.length;
          slider.setAttribute("aria-valuetext", "version " + v + ", " + e.type);
          document.getElementById("asof-event").textContent = e.type + " at " + new Date(e.createdAt).toLocaleString() + " by " + (e.createdBy || "–");
          document.getElementById("state").textContent = JSON.stringify(after, null, 2);
          var dt = document.querySelector("#diff tbody");
          dt.replaceChildren();
          Object.keys(Object.assign({}, before, after)).sort().forEach(function (k) {
            var x = JSON.stringify(before[k]), y = JSON.stringify(after[k]);
            if (x === y) { return; }
            var tr = el("tr", { "data-field": k });
            cell(tr, k); cell(tr, x === undefined ? "–" : x, "before"); cell(tr, y === undefined ? "–" : y, "after");
            dt.appendChild(tr);
          });
        }
        slider.addEventListener("input", show);
        show();
      });
  }

  function integration(v) {
    var qb = document.querySelector("#queues tbody");
    qb.replaceChildren();
    v.queues.forEach(function (q) {
      var tr = el("tr", { "data-key": q.name, "data-depth": String(q.depth) });
      cell(tr, q.name); cell(tr, q.depth + (q.atLeast ? "+" : ""), "n"); cell(tr, q.note);
      qb.appendChild(tr);
    });
    var tb = document.querySelector("#dead tbody");
    tb.replaceChildren();
    if (!v.dead.length) { var tr0 = el("tr"); cell(tr0, v.hasDead ? "No dead messages." : "The app has no integration events.").colSpan = 7; tb.appendChild(tr0); }
    v.dead.forEach(function (d) {
      var key = d.message.id + "/" + (d.handler || ""), tr = el("tr", { "data-key": key });
      cell(tr, d.message.id.slice(0, 8)); cell(tr, d.message.type); cell(tr, d.handler || "all");
      cell(tr, d.attempts, "n"); cell(tr, new Date(d.deadAt).toLocaleString()); cell(tr, d.lastError, "err");
      var td = cell(tr, "", "actions");
      [["retry", "Hand message " + d.message.id + " to its handler once more?"], ["drop", "Drop message " + d.message.id + " for good?"]].forEach(function (a) {
        var b = el("button", { type: "button", "data-key": key, "data-op": a[0], "aria-label": a[0] + " " + d.message.type + " " + d.message.id }, a[0]);
        b.addEventListener("click", function () {
          confirmAction(a[1]).then(function (yes) {
            if (!yes) { return; }
            post("/integration/" + a[0], { id: d.message.id, handler: d.handler || "" }).then(function (r) {
              notice(r.ok ? d.message.type + ": " + a[0] + " done." : d.message.type + ": " + a[0] + " refused: " + (r.body.detail || r.body.code), r.ok);
            });
          });
        });
        td.appendChild(b);
      });
      tb.appendChild(tr);
    });
  }

  if (page === "integration") { live("/integration/live", integration); }
  if (page === "consumers") { live("/consumers/live", consumers); }
  if (page === "projections") { live("/projections/live", projections); }
  if (page === "events") { events(); }
  if (page === "timeline") { timeline(); }
})();
