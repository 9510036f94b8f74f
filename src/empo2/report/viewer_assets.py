"""Inline CSS and JavaScript of the trajectory viewer (kept as strings so the page is one file).

The script reads the JSON block ``#viewer-data`` and builds the page with ``textContent`` only:
no data string is ever parsed as HTML. State (run, iteration or evaluation, episode, and the
variation / mode / score filters) lives in the URL hash (``#run=0&it=1&ep=2&score=success``) so
a view can be linked; ``j`` / ``k`` step through the episodes that pass the filters.
"""

CSS = r"""
:root { --bg:#f5f6f8; --card:#fff; --line:#dde1e6; --ink:#1f2933; --mute:#66707a; --accent:#2563eb;
        --ok:#15803d; --okbg:#dcfce7; --bad:#b91c1c; --badbg:#fee2e2; --warn:#92400e; --warnbg:#fef3c7;
        --tipbg:#f3e8ff; --tip:#6b21a8; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;
       background:var(--bg); color:var(--ink); }
header { display:flex; align-items:center; gap:18px; flex-wrap:wrap; padding:10px 18px; background:#1f2937;
         color:#f9fafb; position:sticky; top:0; z-index:2; }
header h1 { font-size:16px; margin:0 12px 0 0; font-weight:600; }
header label { font-size:13px; color:#d1d5db; }
header select { margin-left:6px; font:inherit; padding:3px 6px; border-radius:5px; border:1px solid #4b5563;
                background:#111827; color:#f9fafb; max-width:340px; }
header .hint { margin-left:auto; font-size:12px; color:#9ca3af; }
.note { padding:6px 18px; font-size:12.5px; color:var(--warn); background:var(--warnbg);
        border-bottom:1px solid var(--line); }
.note:empty { display:none; }
#layout { display:grid; grid-template-columns:300px 1fr; min-height:calc(100vh - 52px); }
nav { border-right:1px solid var(--line); background:#fbfbfc; overflow-y:auto; max-height:calc(100vh - 52px);
      position:sticky; top:52px; }
nav .summary { padding:10px 14px; font-size:12.5px; color:var(--mute); border-bottom:1px solid var(--line); }
nav button { display:block; width:100%; text-align:left; border:0; border-bottom:1px solid var(--line);
             background:none; padding:8px 14px; font:inherit; cursor:pointer; color:inherit; }
nav button:hover { background:#eef2ff; }
nav button.active { background:#e0e7ff; box-shadow:inset 3px 0 0 var(--accent); }
nav .ep-id { font-family:ui-monospace,SFMono-Regular,Menlo,"DejaVu Sans Mono",monospace; font-size:12.5px; }
nav .ep-meta { font-size:12px; color:var(--mute); }
nav .ep-meta .badge { font-size:11px; padding:0 6px; margin-left:2px; }
main { padding:16px 24px 40px; max-width:1100px; }
main h2 { margin:0 0 6px; font-size:18px; font-family:ui-monospace,SFMono-Regular,Menlo,"DejaVu Sans Mono",monospace; }
.badges { display:flex; flex-wrap:wrap; gap:6px; margin:4px 0 12px; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; background:#e5e7eb; color:#374151;
         white-space:nowrap; }
.badge.ok { background:var(--okbg); color:var(--ok); } .badge.bad { background:var(--badbg); color:var(--bad); }
.badge.warn { background:var(--warnbg); color:var(--warn); } .badge.tip { background:var(--tipbg); color:var(--tip); }
.badge.info { background:#dbeafe; color:#1e40af; }
.box { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; margin:8px 0 14px; }
.label { font-size:11.5px; text-transform:uppercase; letter-spacing:.04em; color:var(--mute); margin:8px 0 3px; }
pre { margin:0; white-space:pre-wrap; word-break:break-word;
      font:12.5px/1.45 ui-monospace,SFMono-Regular,Menlo,"DejaVu Sans Mono",monospace; }
.step { background:var(--card); border:1px solid var(--line); border-radius:8px; padding:10px 14px; margin:10px 0; }
.step-head { display:flex; align-items:center; gap:8px; flex-wrap:wrap; }
.step-no { font-weight:600; margin-right:4px; }
.verdict { margin:8px 0 2px; }
.obs { background:#f8fafc; border:1px solid #edf0f3; border-radius:6px; padding:8px 10px; }
.tips { margin:0; padding-left:20px; } .tips li { margin:3px 0; }
.tips pre { background:var(--tipbg); color:#3b0764; border-radius:5px; padding:4px 8px; }
.act { display:grid; grid-template-columns:1fr 1fr; gap:12px; }
.act.same { grid-template-columns:1fr; }
.act pre { background:#eff6ff; border:1px solid #dbeafe; border-radius:6px; padding:6px 10px; }
.act pre.exec { background:#ecfdf5; border-color:#bbf7d0; font-weight:600; }
.tipbox { background:var(--tipbg); border:1px solid #e9d5ff; }
.empty { color:var(--mute); font-style:italic; }
"""

JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("viewer-data").textContent);
  var MODES = {eval: "evaluation · no memory", plain: "plain · no tips", on_policy_tips: "tips · on-policy update",
               off_policy: "tips · off-policy update"};
  var SCORES = [["all", "any score"], ["success", "success"], ["failed", "failed"], ["positive", "score > 0"],
                ["zero", "score = 0"]];
  var ALIASES = {negative: "failed"};  // links made before the "failed" filter
  var state = {run: 0, it: 0, ep: 0, variation: "all", mode: "all", score: "all"};
  var $ = function (id) { return document.getElementById(id); };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function num(v, d) {
    if (typeof v !== "number") return "—";
    return Number.isInteger(v) ? String(v) : v.toFixed(d === undefined ? 1 : d);
  }
  function signed(v) { return typeof v === "number" && v > 0 ? "+" + num(v) : num(v); }
  // Failed by the environment family's rule (the episode's "failed", Trajectory.failed: ScienceWorld a score
  // below 0, TextWorld / TextWorldExpress / WebShop no success); files without it: a score below 0.
  function failed(e) { return typeof e.failed === "boolean" ? e.failed : typeof e.score === "number" && e.score < 0; }
  // A score on the 0–100 scale every table uses: a negative one (an environment's failure, e.g. −100) counts 0.
  function shownScore(v) { return typeof v === "number" ? num(Math.max(v, 0)) : num(v); }
  function rawNote(v) { return typeof v === "number" && v < 0 ? "the environment scored " + num(v) + ", counted 0" : ""; }
  function badge(parent, text, kind, title) {
    var b = el("span", "badge" + (kind ? " " + kind : ""), text);
    if (title) b.title = title;
    parent.appendChild(b);
    return b;
  }
  function runs() { return DATA.runs || []; }
  function curRun() { return runs()[state.run]; }
  function curIt() { var r = curRun(); return r ? r.iterations[state.it] : undefined; }
  function curEp() { var i = curIt(); return i ? i.episodes[state.ep] : undefined; }
  function passes(e) {
    if (state.variation !== "all" && String(e.task + " v" + e.variation) !== state.variation) return false;
    if (state.mode !== "all" && e.mode !== state.mode) return false;
    var sc = typeof e.score === "number" ? e.score : 0;
    if (state.score === "success") return !!e.success;
    if (state.score === "positive") return sc > 0;
    if (state.score === "zero") return sc === 0;
    if (state.score === "failed") return failed(e);
    return true;
  }
  function shown() {  // indices of the current iteration's episodes that pass the filters
    var i = curIt(), out = [];
    if (i) i.episodes.forEach(function (e, k) { if (passes(e)) out.push(k); });
    return out;
  }
  function fillFilter(id, values, labels, current) {
    var sel = $(id); clear(sel);
    values.forEach(function (v, k) { var o = el("option", null, labels[k]); o.value = v; sel.appendChild(o); });
    sel.value = values.indexOf(current) >= 0 ? current : "all";
    return sel.value;
  }
  function lastTrain(r) {  // the newest training iteration (the run's evaluations follow the iterations)
    var k = r.iterations.length - 1;
    while (k > 0 && r.iterations[k].kind === "eval") k--;
    return Math.max(k, 0);
  }
  function clamp(v, n) { v = parseInt(v, 10); return isNaN(v) || v < 0 ? 0 : Math.min(v, Math.max(n - 1, 0)); }

  function readHash() {
    var h = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
      var p = kv.split("="); if (p.length === 2) h[p[0]] = p[1];
    });
    state.run = clamp(h.run, runs().length);
    var r = curRun();
    state.it = r ? clamp(h.it === undefined ? lastTrain(r) : h.it, r.iterations.length) : 0;
    var i = curIt();
    state.ep = i ? clamp(h.ep, i.episodes.length) : 0;
    ["variation", "mode", "score"].forEach(function (k) { state[k] = h[k] ? decodeURIComponent(h[k]) : "all"; });
    state.score = ALIASES[state.score] || state.score;
  }
  function writeHash() {
    var h = "#run=" + state.run + "&it=" + state.it + "&ep=" + state.ep;
    ["variation", "mode", "score"].forEach(function (k) {
      if (state[k] !== "all") h += "&" + k + "=" + encodeURIComponent(state[k]);
    });
    if (location.hash !== h) history.replaceState(null, "", h);
  }

  function fillSelects() {
    var rs = $("run"), is = $("iteration");
    clear(rs); clear(is);
    runs().forEach(function (r, k) {
      var o = el("option", null, r.name + " · " + r.algorithm); o.value = k; rs.appendChild(o);
    });
    rs.value = state.run;
    var r = curRun();
    if (r) r.iterations.forEach(function (it, k) {
      var text = it.kind === "eval" ? it.title + "  (" + it.file + ")"
        : "iteration " + it.iteration + " of " + r.planned_iterations + "  (" + it.file + ")";
      var o = el("option", null, text);
      o.value = k; is.appendChild(o);
    });
    is.value = state.it;
    var i = curIt(), vs = ["all"], ms = ["all"];
    if (i) i.episodes.forEach(function (e) {
      var v = e.task + " v" + e.variation;
      if (vs.indexOf(v) < 0) vs.push(v);
      if (ms.indexOf(e.mode) < 0) ms.push(e.mode);
    });
    state.variation = fillFilter("f-variation", vs, ["all"].concat(vs.slice(1)), state.variation);
    state.mode = fillFilter("f-mode", ms, ["all"].concat(ms.slice(1).map(function (m) { return MODES[m] || m; })),
                            state.mode);
    state.score = fillFilter("f-score", SCORES.map(function (x) { return x[0]; }),
                             SCORES.map(function (x) { return x[1]; }), state.score);
    $("note").textContent = r && r.note ? r.path + ": " + r.note + "." : "";
  }

  function renderList() {
    var nav = $("episodes"), it = curIt();
    clear(nav);
    if (!it) return;
    var idx = shown(), scores = 0, wins = 0;
    idx.forEach(function (k) { var e = it.episodes[k]; scores += Math.max(e.score || 0, 0); wins += e.success ? 1 : 0; });
    var filtered = idx.length < it.episodes.length ? " (" + idx.length + " match the filters)" : "";
    nav.appendChild(el("div", "summary", it.episodes.length + " of " + it.total_episodes + " episodes embedded" +
      filtered + " · mean score " + num(idx.length ? scores / idx.length : NaN) + " · success " + wins + "/" +
      idx.length));
    idx.forEach(function (k) {
      var e = it.episodes[k];
      var b = el("button", k === state.ep ? "active" : null);
      b.appendChild(el("div", "ep-id", e.id));
      var meta = el("div", "ep-meta", e.task + " v" + e.variation + " · " + e.mode + " ");
      badge(meta, (e.success ? "✓ " : failed(e) ? "✗ " : "") + shownScore(e.score),
            e.success ? "ok" : failed(e) ? "bad" : e.score > 0 ? "info" : null, failed(e) ? "failed" : null);
      if (e.crashed) badge(meta, "crashed", "bad");
      b.appendChild(meta);
      b.addEventListener("click", function () { state.ep = k; update(); });
      nav.appendChild(b);
    });
  }

  function renderStep(s, k) {  // in the order it happened: tips, action, its verdict, what it produced
    var card = el("section", "step");
    var head = el("div", "step-head");
    head.appendChild(el("span", "step-no", "Step " + (k + 1)));
    card.appendChild(head);
    if (s.tips && s.tips.length) {
      card.appendChild(el("div", "label", "Retrieved tips (" + s.tips.length + ")"));
      var ol = el("ol", "tips");
      s.tips.forEach(function (t) { var li = el("li"); li.appendChild(el("pre", null, t)); ol.appendChild(li); });
      card.appendChild(ol);
    }
    var same = s.raw === s.action, act = el("div", same ? "act same" : "act");
    var c1 = el("div"), c2 = el("div");
    if (same) {
      c1.appendChild(el("div", "label", "Action (model output = executed action)"));
      c1.appendChild(el("pre", "exec action", s.action));
      act.appendChild(c1);
    } else {
      c1.appendChild(el("div", "label", "Model output (raw)"));
      c1.appendChild(el("pre", "raw", s.raw));
      c2.appendChild(el("div", "label", "Executed action"));
      c2.appendChild(el("pre", "exec action", s.action));
      act.appendChild(c1); act.appendChild(c2);
    }
    card.appendChild(act);
    var verdict = el("div", "badges verdict");
    if (s.valid === false) badge(verdict, "invalid action", "bad", "the environment rejected the action");
    else if (s.valid === true) badge(verdict, "valid", "ok");
    if (s.corrected) badge(verdict, "corrected", "warn", "the model text was corrected to a valid action");
    if (typeof s.score === "number" && s.score < 0) {  // the environment's failure score (−100): said as a failure
      badge(verdict, "failed", "bad", rawNote(s.score) + (typeof s.reward === "number" ? "; reward " + signed(s.reward) : ""));
    } else {
      if (typeof s.reward === "number") badge(verdict, "reward " + signed(s.reward), s.reward > 0 ? "ok" : s.reward < 0 ? "bad" : null);
      if (typeof s.score === "number") badge(verdict, "score " + num(s.score), "info");
    }
    if (typeof s.intrinsic === "number" && s.intrinsic !== 0) badge(verdict, "r_int " + num(s.intrinsic, 3), "tip");
    if (verdict.firstChild) card.appendChild(verdict);
    if (s.result !== null && s.result !== undefined) {
      card.appendChild(el("div", "label", "Observation after this action"));
      card.appendChild(el("pre", "obs result", s.result));
    }
    return card;
  }

  function renderEpisode() {
    var main = $("episode"), e = curEp();
    clear(main);
    if (!e) { main.appendChild(el("p", "empty", "No trajectories in this run.")); return; }
    if (!passes(e)) { main.appendChild(el("p", "empty", "No episode of this iteration matches the filters.")); return; }
    main.appendChild(el("h2", null, e.id));
    var b = el("div", "badges");
    badge(b, e.task + " · variation " + e.variation, "info");
    badge(b, MODES[e.mode] || e.mode, e.mode === "plain" ? null : "tip");
    badge(b, "final score " + shownScore(e.score), e.score > 0 ? "ok" : null, rawNote(e.score) || null);
    badge(b, e.success ? "success" : failed(e) ? "failed" : "no success", e.success ? "ok" : failed(e) ? "bad" : "warn");
    if (e.crashed) badge(b, "environment crashed", "bad");
    badge(b, e.steps.length + (e.steps.length === 1 ? " step" : " steps"));
    main.appendChild(b);
    if (e.eval) {
      main.appendChild(el("p", "empty", "An evaluation episode (no memory, no update): evaluation files record " +
                                         "its actions and scores, not its observations."));
    } else {
      main.appendChild(el("div", "label", "Task"));
      main.appendChild(el("div", "box task", e.task_description || "(no task description recorded)"));
      if (e.initial_observation !== null && e.initial_observation !== undefined) {
        main.appendChild(el("div", "label", "Initial observation"));
        main.appendChild(el("pre", "obs initial", e.initial_observation));
      }
    }
    var steps = el("div", "steps");
    e.steps.forEach(function (s, k) { steps.appendChild(renderStep(s, k)); });
    main.appendChild(steps);
    if (e.eval) return;
    main.appendChild(el("div", "label", "Tip written after this episode"));
    var tb = el("div", "box tipbox");
    if (e.tip) tb.appendChild(el("pre", "tip", e.tip)); else tb.appendChild(el("span", "empty", "(no tip)"));
    main.appendChild(tb);
  }

  function firstShown() {  // keep the episode if it passes the filters, else the first one that does
    var idx = shown();
    if (idx.length && idx.indexOf(state.ep) < 0) state.ep = idx[0];
  }
  function update() { fillSelects(); firstShown(); writeHash(); renderList(); renderEpisode(); }
  ["variation", "mode", "score"].forEach(function (k) {
    $("f-" + k).addEventListener("change", function (ev) { state[k] = ev.target.value; update(); });
  });

  $("run").addEventListener("change", function (ev) {
    state.run = clamp(ev.target.value, runs().length);
    var r = curRun(); state.it = r ? lastTrain(r) : 0; state.ep = 0; update();
  });
  $("iteration").addEventListener("change", function (ev) {
    var r = curRun(); state.it = clamp(ev.target.value, r ? r.iterations.length : 0); state.ep = 0; update();
  });
  document.addEventListener("keydown", function (ev) {
    var it = curIt();
    if (!it || ev.target.tagName === "SELECT") return;
    var idx = shown(), pos = idx.indexOf(state.ep);
    if (!idx.length) return;
    if (ev.key === "j") state.ep = idx[Math.min(pos + 1, idx.length - 1)];
    else if (ev.key === "k") state.ep = idx[Math.max(pos - 1, 0)];
    else return;
    update(); window.scrollTo(0, 0);
  });
  window.addEventListener("hashchange", function () { readHash(); fillSelects(); firstShown(); renderList(); renderEpisode(); });
  readHash();
  update();
  document.body.setAttribute("data-rendered", "1");
})();
"""
