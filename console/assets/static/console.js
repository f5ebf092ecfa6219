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
  // live keeps render fed from the SSE stream at path; lost, if given,
  // learns that the stream broke (the browser reconnects on its own).
  function live(path, render, lost) {
    var src = new EventSource(prefix + path);
    src.onmessage = function (m) { render(JSON.parse(m.data)); };
    if (lost) { src.onerror = lost; }
    window.addEventListener("pagehide", function () { src.close(); });
  }
  // rows keeps the rows of tb in step with items, one per key: a new key
  // gets a row from make, every row is refreshed by update (with the item
  // also on tr.item, for its buttons), rows of gone keys leave. Rows stay
  // in place, so a button keeps its focus across updates.
  function rows(tb, items, keyOf, make, update, emptyText) {
    var seen = {};
    if (!items.length) {
      if (!tb.querySelector("tr.empty")) {
        tb.replaceChildren();
        var tr0 = el("tr", { "class": "empty" });
        cell(tr0, emptyText).colSpan = tb.parentNode.querySelectorAll("thead th").length;
        tb.appendChild(tr0);
      }
      return;
    }
    items.forEach(function (it) {
      var key = keyOf(it);
      seen[key] = true;
      var tr = tb.querySelector('tr[data-key="' + CSS.escape(key) + '"]');
      if (!tr) { tr = el("tr", { "data-key": key }); make(tr, key); tb.appendChild(tr); }
      tr.item = it;
      update(tr, it);
    });
    Array.prototype.slice.call(tb.children).forEach(function (tr) {
      if (!seen[tr.dataset.key]) { tr.remove(); }
    });
  }
  // cells gives tr n empty cells with the classes in cls (by index).
  function cells(tr, n, cls) {
    for (var i = 0; i < n; i++) { cell(tr, "", cls[i]); }
  }
  function setCells(tr, texts) {
    texts.forEach(function (t, i) { if (t !== null && tr.children[i].textContent !== String(t)) { tr.children[i].textContent = String(t); } });
  }
  // button adds an action button to td that confirms with question(item)
  // and then runs act(item).
  function button(td, tr, key, op, label, question, act) {
    var b = el("button", { type: "button", "data-key": key, "data-op": op, "aria-label": label }, op);
    b.addEventListener("click", function () {
      var it = tr.item;
      confirmAction(question(it)).then(function (yes) { if (yes) { act(it); } });
    });
    td.appendChild(b);
  }

  function num(v) { return v === undefined || v === null ? "" : String(v); }
  function secs(v) { return v ? v.toFixed(1) : "0"; }

  var lags = {};
  function sparkline(key, value) {
    var h = lags[key] || (lags[key] = []);
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
  function consumers(v) {
    rows(document.querySelector("#consumers tbody"), v.shards, function (s) { return s.name + "/" + s.instanceId; },
      function (tr, key) {
        cells(tr, 14, ["", "", "", "", "status", "n", "n", "n lag", "n", "spark", "n", "n parked", "err", "actions"]);
        Object.keys(ops).forEach(function (op) {
          button(tr.children[13], tr, key, op, op + " " + key, function () { return ops[op].replace("{s}", key); }, function (s) {
            post("/consumers/" + op, { name: s.name, instance: s.instanceId }).then(function (r) {
              notice(r.ok ? key + ": " + op + " done, now " + r.body.data.status + "." : key + ": " + op + " refused: " + (r.body.detail || r.body.code), r.ok);
            });
          });
        });
      },
      function (tr, s) {
        var key = tr.dataset.key;
        var partition = s.partitions ? s.partition + "/" + s.partitions : "";
        tr.dataset.status = s.status;
        tr.dataset.lag = String(s.lagEvents);
        tr.dataset.partition = partition;
        tr.dataset.parked = String(s.parked);
        tr.children[4].className = "status status-" + s.status;
        // A stuck shard names the event its handler runs on, the process
        // running it and for how long.
        var status = s.status + (s.liveness ? " (" + s.liveness + ")" : "");
        if (s.status === "stuck") {
          status += ": event " + s.stuckEventId + " on " + s.stuckInstanceId + " for " + secs(s.stuckSeconds) + " s";
          tr.dataset.stuckEvent = String(s.stuckEventId);
        } else {
          delete tr.dataset.stuckEvent;
        }
        setCells(tr, [s.name, s.instanceId, partition, s.owner || (s.partitions ? "none live" : ""), status, num(s.cursor), num(s.head),
          num(s.lagEvents), secs(s.lagSeconds), null,
          s.gapWaitSeconds ? secs(s.gapWaitSeconds) + (s.gapBackends.length ? " (pids " + s.gapBackends.join(", ") + ")" : "") : "",
          s.parked ? String(s.parked) : "", s.lastError]);
        tr.children[9].replaceChildren(sparkline(key, s.lagEvents));
      }, "No consumer shards yet.");
    rows(document.querySelector("#parked tbody"), v.parked, function (p) { return p.name + "/" + p.stream; },
      function (tr, key) {
        cells(tr, 10, ["", "", "", "n", "", "n", "", "action", "err", "actions"]);
        [["retry", "Retry the stream {s} from the event that failed?"], ["skip", "Skip the failing event of the stream {s}? The consumer will never handle it."]].forEach(function (a) {
          button(tr.children[9], tr, key, a[0], a[0] + " " + key, function () { return a[1].replace("{s}", key); }, function (p) {
            post("/consumers/parked/" + a[0], { name: p.name, stream: p.stream }).then(function (r) {
              notice(r.ok ? key + ": " + a[0] + " requested; the consumer's next pass does it." : key + ": " + a[0] + " refused: " + (r.body.detail || r.body.code), r.ok);
            });
          });
        });
      },
      function (tr, p) {
        tr.dataset.action = p.action;
        setCells(tr, [p.name, p.shard, p.stream, p.eventId, p.eventType, p.attempts, new Date(p.since).toLocaleString(),
          p.action || "", p.lastError]);
      }, "No parked streams.");
  }

  function projections(list) {
    rows(document.querySelector("#projections tbody"), list, function (p) { return p.name; },
      function (tr, key) {
        cells(tr, 11, ["", "", "status", "n", "n", "n", "n", "", "progress", "err", "actions"]);
        var pr = el("progress", { max: "100", value: "0", "aria-label": "rebuild of " + key });
        pr.hidden = true;
        tr.children[8].appendChild(pr);
        tr.children[8].appendChild(el("span", { "class": "percent" }));
        button(tr.children[10], tr, key, "rebuild", "rebuild " + key, function () { return "Rebuild " + key + " from the stored events?"; }, function (p) {
          post("/projections/rebuild", { name: p.name }).then(function (r) {
            notice(r.ok ? p.name + ": rebuild started." : p.name + ": rebuild refused: " + (r.body.detail || r.body.code), r.ok);
          });
        });
      },
      function (tr, p) {
        tr.dataset.status = p.status;
        tr.children[2].className = "status status-" + p.status;
        setCells(tr, [p.name, p.kind, p.status, num(p.cursor), num(p.head), num(p.lag), secs(p.lagSeconds),
          p.lastRebuildAt ? new Date(p.lastRebuildAt).toLocaleString() : "never", null,
          (p.rebuild && p.rebuild.error) || p.lastError || ""]);
        var bar = tr.children[8].firstChild, pct = tr.children[8].lastChild;
        if (p.rebuild) {
          tr.dataset.rebuild = p.rebuild.running ? "running" : p.rebuild.error ? "failed" : String(p.rebuild.percent);
          bar.hidden = false;
          bar.value = p.rebuild.percent;
          pct.textContent = p.rebuild.percent + " %" + (p.rebuild.running ? "" : p.rebuild.error ? " failed" : " done");
        }
      }, "No projections.");
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
        var e = JSON.parse(m.data), tr = el("tr", { "data-id": String(e.id), "data-type": e.type });
        cell(tr, e.id, "n"); cell(tr, new Date(e.createdAt).toLocaleString()); cell(tr, e.type);
        var a = el("a", { href: prefix + "/aggregates/" + encodeURIComponent(e.aggregateType) + "/" + e.aggregateId }, e.aggregateType + " " + e.aggregateId.slice(0, 8));
        cell(tr, "").appendChild(a);
        cell(tr, e.version, "n"); cell(tr, JSON.stringify(e.payload), "payload");
        tb.insertBefore(tr, tb.firstChild);
        while (tb.children.length > 200) { tb.removeChild(tb.lastChild); }
      };
    }
    var start = new URLSearchParams(location.search);
    form.elements.type.value = start.get("type") || "";
    form.elements.aggregate.value = start.get("aggregate") || "";
    form.addEventListener("submit", function (ev) {
      ev.preventDefault();
      history.replaceState(null, "", "?" + new URLSearchParams(new FormData(form)).toString());
      connect();
    });
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
        if (r.body.states) {
          // An entity: its state after each event, as the server folds it.
          r.body.states.forEach(function (s) { states.push(s || {}); });
        } else {
          // Events without a kept state: the payloads so far, merged.
          evs.forEach(function (e, i) { states.push(merge(states[i], e.payload)); });
        }
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
    rows(document.querySelector("#queues tbody"), v.queues, function (q) { return q.name; },
      function (tr) { cells(tr, 3, ["", "n", ""]); },
      function (tr, q) {
        tr.dataset.depth = String(q.depth);
        setCells(tr, [q.name, q.depth + (q.atLeast ? "+" : ""), q.note]);
      }, "No queues.");
    rows(document.querySelector("#dead tbody"), v.dead, function (d) { return d.message.id + "/" + (d.handler || ""); },
      function (tr, key) {
        cells(tr, 7, ["", "", "", "n", "", "err", "actions"]);
        [["retry", "Hand the message to its handler once more?"], ["drop", "Drop the message for good?"]].forEach(function (a) {
          button(tr.children[6], tr, key, a[0], a[0] + " " + key, function (d) { return a[1] + " (" + d.message.type + " " + d.message.id + ")"; }, function (d) {
            post("/integration/" + a[0], { id: d.message.id, handler: d.handler || "" }).then(function (r) {
              notice(r.ok ? d.message.type + ": " + a[0] + " done." : d.message.type + ": " + a[0] + " refused: " + (r.body.detail || r.body.code), r.ok);
            });
          });
        });
      },
      function (tr, d) {
        setCells(tr, [d.message.id.slice(0, 8), d.message.type, d.handler || "all", d.attempts,
          new Date(d.deadAt).toLocaleString(), d.lastError]);
      }, v.hasDead ? "No dead messages." : "The app has no integration events.");
  }

  // text sets the text of the element id only when it changed: the jobs
  // status is a live region, announced on every change.
  function text(id, t) {
    var e = document.getElementById(id);
    if (e.textContent !== t) { e.textContent = t; }
    return e;
  }
  function para(id, t, cls) {
    var p = text(id, t || "");
    p.hidden = !t;
    if (cls && p.className !== cls) { p.className = cls; }
  }
  function jobs(st) {
    document.getElementById("jobs-status").dataset.level = st.level;
    var line = document.getElementById("jobs-line"), cls = st.live ? "ok" : "warning";
    if (line.className !== cls) { line.className = cls; }
    text("jobs-line-text", st.line);
    text("jobs-detail", st.detail || "");
    para("jobs-overdue", st.overdueText, st.live ? "note" : "warning");
    para("jobs-paused", st.pausedText);
  }
  function jobsLost() {
    jobs({ level: "unknown", live: false, line: "The status is not current.", detail: "The console is reconnecting." });
  }

  if (page === "jobs" && document.getElementById("jobs-status")) { live("/jobs-status/live", jobs, jobsLost); }
  if (page === "integration") { live("/integration/live", integration); }
  if (page === "consumers") { live("/consumers/live", consumers); }
  if (page === "projections") { live("/projections/live", projections); }
  if (page === "events") { events(); }
  if (page === "timeline") { timeline(); }
})();
