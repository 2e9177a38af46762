// Ferry portal UI: a small hash-routed single page over the REST API. No dependencies, no inline
// code (strict CSP), and every API value reaches the page through textContent, never innerHTML.
"use strict";

const main = document.getElementById("main");
let timer = null;

// ---- helpers -------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "on") for (const [ev, fn] of Object.entries(v)) node.addEventListener(ev, fn);
    else if (k === "text") node.textContent = v;
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) if (c !== null && c !== undefined) node.append(c instanceof Node ? c : String(c));
  return node;
}
function token() { return sessionStorage.getItem("ferry-token"); }
function toast(message) {
  const t = document.getElementById("toast");
  t.textContent = message;
  t.classList.add("show");
  setTimeout(() => t.classList.remove("show"), 2500);
}
async function api(method, path, body) {
  const res = await fetch("/api/v1" + path, {
    method,
    headers: { "Authorization": "Bearer " + token(), ...(body !== undefined ? { "Content-Type": "application/json" } : {}) },
    body: body !== undefined ? JSON.stringify(body) : undefined,
  });
  if (res.status === 401) { sessionStorage.removeItem("ferry-token"); route(); throw new Error("signed out"); }
  const data = res.status === 204 ? null : await res.json().catch(() => null);
  if (!res.ok) { const err = new Error((data && data.error) || res.statusText); err.field = data && data.field; err.status = res.status; throw err; }
  return data;
}
function fmt(n) { return n === null || n === undefined ? "—" : Number(n).toLocaleString(); }
function badge(state) { return el("span", { class: "badge " + state, text: state }); }
function clear() { if (timer) { clearInterval(timer); timer = null; } main.replaceChildren(); }
// A page redrawn every 5 s: the link that had the keyboard focus keeps it, and an API error is
// shown (and retried) instead of leaving the page blank.
function poll(hash, page) {
  timer = setInterval(() => { if ((location.hash || "#/subscriptions") === hash) redraw(hash, page); }, 5000);
}
async function redraw(hash, page) {
  const had = document.activeElement;
  const href = had && main.contains(had) ? had.getAttribute("href") : null;
  clear();
  try { await page(); } catch (err) {
    if (err.message === "signed out") return;
    main.append(el("p", { class: "card error", role: "alert", text: `${err.message} (retrying every 5 s)` }));
    poll(hash, page);
  }
  if (href) { const again = [...main.querySelectorAll("a[href]")].find((a) => a.getAttribute("href") === href); if (again) again.focus(); }
}

// ---- login ---------------------------------------------------------------------------------
function login() {
  document.getElementById("nav").hidden = true;
  const input = el("input", { id: "token", type: "password", autocomplete: "off", required: true });
  const error = el("div", { class: "error", id: "login-error" });
  const form = el("form", { class: "card login", on: { submit: async (e) => {
    e.preventDefault();
    const candidate = input.value.trim();
    const res = await fetch("/api/v1/subscriptions", { headers: { "Authorization": "Bearer " + candidate } }).catch(() => null);
    if (res && res.ok) {
      // Open the page the address names: a link to a subscription that asked for a token lands there.
      sessionStorage.setItem("ferry-token", candidate);
      route();
    }
    else {
      // Only a 401 means a wrong token; say what else went wrong (a block after wrong tokens, no portal).
      const why = !res ? "The portal cannot be reached." : res.status === 401 ? "That token was not accepted."
        : ((await res.json().catch(() => null)) || {}).error || `The portal answered ${res.status}.`;
      error.textContent = why; input.select();
    }
  } } },
    el("h1", { text: "Sign in to Ferry" }),
    el("div", { class: "field" }, el("label", { for: "token", text: "API token" }), input,
      el("div", { class: "hint", text: "The admin token is printed by `ferry dev` and stored in state.json." })),
    error,
    el("button", { class: "primary", type: "submit", text: "Sign in" }));
  main.append(form);
  input.focus();
}

// ---- subscriptions list --------------------------------------------------------------------
const HEALTH_HINT = {
  ok: "delivering, nothing failing",
  lagging: "more than 1,000 records behind and further behind than a minute ago",
  stalled: "a partition's committed watermark has not moved for 60 s",
  failing: "records dead-lettered, or more retries than deliveries, in the last minute",
  paused: "paused: nothing is pushed",
  unknown: "no worker reports its partitions yet",
};
function healthBadge(h) { return el("span", { class: "badge health " + h, text: h, title: HEALTH_HINT[h] || "" }); }
function rate(n) { return n === null || n === undefined ? "—" : (n < 10 ? Number(n).toFixed(1) : fmt(Math.round(n))); }
async function list() {
  const [{ subscriptions }, health] = await Promise.all([api("GET", "/subscriptions"), api("GET", "/health")]);
  const byName = Object.fromEntries(health.subscriptions.map((h) => [h.name, h]));
  const rows = subscriptions.map((s) => {
    const h = byName[s.name] || { health: "unknown" };
    return el("tr", { "data-name": s.name },
      el("td", {}, el("a", { href: `#/subscriptions/${encodeURIComponent(s.name)}`, text: s.name })),
      el("td", { text: s.topics.join(", ") }),
      el("td", { class: "mono", text: s.endpoint.url }),
      el("td", {}, badge(s.state)),
      el("td", { class: "health-cell" }, healthBadge(h.health)),
      el("td", { class: "num", text: fmt(h.lag) }),
      el("td", { class: "num", text: rate(h.delivered_per_s) }),
      el("td", { class: "num", text: fmt(h.dead_lettered_1h) }),
      el("td", { class: "num", text: h.stalled_s === null || h.stalled_s === undefined ? "—" : Number(h.stalled_s).toFixed(0) }));
  });
  const heads = [["Name"], ["Topics"], ["Endpoint"], ["State"], ["Health"], ["Lag", "num"], ["Delivered/s", "num"],
    ["Dead letters (1 h)", "num", "records dead-lettered in the last hour, as sampled by this portal"],
    ["Held (s)", "num", "the longest time a partition's committed watermark has not moved"]];
  main.append(
    el("div", { class: "toolbar" }, el("h1", { text: "Subscriptions" }),
      el("a", { class: "button primary", href: "#/new", text: "New subscription" })),
    rows.length
      ? el("table", { id: "subscriptions" }, el("thead", {}, el("tr", {}, heads.map(([h, cls, title]) => el("th", { class: cls || null, title: title || null, text: h })))), el("tbody", {}, rows))
      : el("p", { class: "card muted", text: "No subscriptions yet. Create one to start pushing records to an HTTP endpoint." }),
    el("p", { class: "muted small", text: `Health and rates from the last minute of samples taken every ${health.interval_s} s; hover a badge for what it means.` }));
  poll("#/subscriptions", list);
}

// ---- create / edit -------------------------------------------------------------------------
const FIELDS = [
  ["name", "Name", "text", "lowercase letters, digits, . _ -"],
  ["topics", "Topics", "text", "comma-separated Kafka topics"],
  ["clusters", "Kafka clusters", "text", "comma-separated cluster names (FERRY_KAFKA_CLUSTERS); empty: default"],
  ["endpoint.url", "Endpoint URL", "url", "http(s) URL records are POSTed to"],
  ["endpoint.timeout_ms", "Timeout (ms)", "number", ""],
  ["endpoint.headers", "Endpoint headers", "textarea", "one `Name: value` per line; values are secret and shown as ***"],
  ["ordering", "Ordering", "select:key,partition,none", "key: per-key order, keys in parallel"],
  ["max_in_flight", "Max in flight (per partition)", "number", ""],
  ["concurrency.mode", "Concurrency", "select:fixed,adaptive", "adaptive: each worker learns how many pushes the endpoint takes at once, within min and max"],
  ["concurrency.min", "Adaptive: min", "number", "default 1"],
  ["concurrency.max", "Adaptive: max", "number", "default: max in flight"],
  ["retry.max_attempts", "Max attempts", "number", ""],
  ["retry.initial_backoff_ms", "Initial backoff (ms)", "number", ""],
  ["retry.max_backoff_ms", "Max backoff (ms)", "number", ""],
  ["delay_ms", "Delay (ms)", "number", "push each record no earlier than its timestamp + this (up to 7 days)"],
  ["filter", "Filter (JSON)", "json", 'only matching records are pushed, e.g. {"exact": {"type": "order"}}, {"prefix": {"source": "shop"}} or {"sql": "INT(amount) >= 100"}; empty: every record'],
  ["retry.mode", "Retry mode", "select:memory,durable", "durable: a record waiting for a retry waits in the delay store, not in the window (ordering none only)"],
  ["dead_letter_topic", "Dead-letter topic", "text", "default <name>.dlq"],
  ["start_from", "Start from", "select:earliest,latest", "where a new subscription starts"],
  ["batch.max_records", "Batch: max records per POST", "number", "empty: one record per POST; set: CloudEvents batches"],
  ["batch.max_bytes", "Batch: max bytes per POST", "number", "default 1048576"],
  ["batch.linger_ms", "Batch: linger (ms)", "number", "wait this long for a full batch; default 0"],
];
// What the portal fills in when a field is left empty (docs/api.md).
const DEFAULTS = { "delay_ms": 0, "endpoint.timeout_ms": 5000, "max_in_flight": 100, "retry.max_attempts": 5, "retry.initial_backoff_ms": 200, "retry.max_backoff_ms": 30000, "batch.max_bytes": 1048576, "batch.linger_ms": 0 };
function get(doc, path) { return path.split(".").reduce((o, k) => (o ? o[k] : undefined), doc); }
function drop(doc, path) {
  const keys = path.split("."); const last = keys.pop();
  const o = keys.length ? get(doc, keys.join(".")) : doc;
  if (o && typeof o === "object") delete o[last];
}
function put(doc, path, value) {
  const keys = path.split("."); let o = doc;
  for (const k of keys.slice(0, -1)) o = o[k] = o[k] || {};
  o[keys[keys.length - 1]] = value;
}
async function edit(name) {
  const existing = name ? await api("GET", `/subscriptions/${encodeURIComponent(name)}`) : null;
  const inputs = {}; const errors = {};
  const fields = FIELDS.map(([path, label, type, hint]) => {
    const id = "f-" + path.replace(/\./g, "-");
    let input;
    if (type.startsWith("select:")) input = el("select", { id }, type.slice(7).split(",").map((v) => el("option", { value: v, text: v })));
    else if (type === "textarea" || type === "json") input = el("textarea", { id, rows: 2, spellcheck: type === "json" ? "false" : null });
    else input = el("input", { id, type, placeholder: DEFAULTS[path] === undefined ? null : `default ${DEFAULTS[path]}` });
    let value = existing ? get(existing, path) : undefined;
    if ((path === "topics" || path === "clusters") && value) value = value.join(", ");
    if (path === "endpoint.headers" && value) value = Object.entries(value).map(([k, v]) => `${k}: ${v}`).join("\n");
    if (type === "json" && value) value = JSON.stringify(value);
    if (value !== undefined && value !== null) input.value = value;
    if (path === "name" && existing) input.readOnly = true;
    inputs[path] = input;
    errors[path] = el("div", { class: "error", id: id + "-error" });
    input.setAttribute("aria-describedby", id + "-error");
    return el("div", { class: "field" }, el("label", { for: id, text: label }), input, hint ? el("div", { class: "hint", text: hint }) : null, errors[path]);
  });
  const general = el("div", { class: "error" });
  const form = el("form", { class: "card", novalidate: true, on: { submit: async (e) => {
    e.preventDefault();
    for (const p in errors) { errors[p].textContent = ""; inputs[p].removeAttribute("aria-invalid"); }
    general.textContent = "";
    const doc = existing ? JSON.parse(JSON.stringify(existing)) : {};
    // Batch mode is on exactly when max records is filled in; adaptive concurrency when chosen.
    const batched = inputs["batch.max_records"].value.trim() !== "";
    doc.batch = batched ? {} : null;
    const adaptive = inputs["concurrency.mode"].value === "adaptive";
    doc.concurrency = adaptive ? {} : null;
    for (const [path, , type] of FIELDS) {
      if ((path.startsWith("batch.") && !batched) || (path.startsWith("concurrency.") && !adaptive)) continue;
      let v = inputs[path].value.trim();
      if (type === "json") {
        // Empty removes the filter; a filter that is not JSON is named here, before any request.
        if (v === "") { put(doc, path, null); continue; }
        try { v = JSON.parse(v); } catch (err) {
          errors[path].textContent = "is not valid JSON: " + err.message; inputs[path].setAttribute("aria-invalid", "true"); inputs[path].focus(); return;
        }
        put(doc, path, v); continue;
      }
      // An emptied field gets its default (the hint says which), also when editing.
      if (v === "" && (path in DEFAULTS || path === "clusters")) { drop(doc, path); continue; }
      if (v === "" && path !== "endpoint.headers") continue;
      if (path === "topics" || path === "clusters") v = v.split(",").map((t) => t.trim()).filter(Boolean);
      else if (path === "endpoint.headers") {
        const h = {};
        for (const line of v.split("\n")) { const i = line.indexOf(":"); if (i > 0) h[line.slice(0, i).trim()] = line.slice(i + 1).trim(); }
        v = h;
      } else if (type === "number") v = Number(v);
      put(doc, path, v);
    }
    try {
      if (existing) await api("PUT", `/subscriptions/${encodeURIComponent(existing.name)}`, doc);
      else await api("POST", "/subscriptions", doc);
      toast(existing ? "Saved" : "Subscription created");
      location.hash = `#/subscriptions/${encodeURIComponent(doc.name)}`;
    } catch (err) {
      const key = err.field && Object.keys(inputs).find((p) => err.field === p || err.field.startsWith(p + ".") || err.field.startsWith(p + "["));
      if (key) { errors[key].textContent = err.message; inputs[key].setAttribute("aria-invalid", "true"); inputs[key].focus(); }
      else general.textContent = (err.field ? err.field + ": " : "") + err.message;
    }
  } } },
    el("h1", { text: existing ? `Edit ${existing.name}` : "New subscription" }),
    el("div", { class: "grid" }, fields), general,
    el("div", { class: "actions" }, el("button", { class: "primary", type: "submit", text: existing ? "Save" : "Create" }),
      el("a", { class: "button", href: existing ? `#/subscriptions/${encodeURIComponent(existing.name)}` : "#/subscriptions", text: "Cancel" })));
  main.append(form);
  (existing ? inputs["topics"] : inputs["name"]).focus();
}

// ---- one subscription ----------------------------------------------------------------------
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}
function clock(t) { return new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }
// A line chart over time: series [{name, cls, values: [[t, v], ...]}]; x is wall-clock time.
function chart(id, label, series, unit, integer = false) {
  const W = 1000, H = 200, L = 56, R = 12, T = 12, B = 28;
  const all = series.flatMap((s) => s.values);
  const root = svg("svg", { id, class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": label, preserveAspectRatio: "none" });
  if (new Set(all.map((p) => p[0])).size < 2) { root.append(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle", class: "empty" }, "Collecting samples…")); return root; }
  const t0 = Math.min(...all.map((p) => p[0])), t1 = Math.max(t0 + 1, ...all.map((p) => p[0]));
  const max = Math.max(integer ? 4 : 1, ...all.map((p) => p[1]));
  const x = (t) => L + (W - L - R) * (t - t0) / (t1 - t0), y = (v) => T + (H - T - B) * (1 - v / max);
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4;
    root.append(svg("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }),
      svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick y" }, (!integer && max < 10 ? v.toFixed(1) : fmt(Math.round(v))) + (i === 4 && unit ? " " + unit : "")));
  }
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (t1 - t0) * i / 4;
    root.append(svg("text", { x: x(t), y: H - 8, "text-anchor": i === 0 ? "start" : i === 4 ? "end" : "middle", class: "tick x" }, clock(t)));
  }
  for (const s of series) {
    if (!s.values.length) continue;
    root.append(svg("polyline", { class: "series " + s.cls, "data-series": s.name, "data-points": s.values.length,
      points: s.values.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" ") }, undefined));
  }
  return root;
}
function legend(series) {
  return el("div", { class: "legend" }, series.map((s) => el("span", { class: "key " + s.cls, text: s.name })));
}
async function show(name) {
  const path = `/subscriptions/${encodeURIComponent(name)}`;
  const sub = await api("GET", path);
  const state = el("span", { id: "sub-state" }, badge(sub.state));
  const body = el("tbody");
  const charts = el("div", { id: "charts" });
  const healthNow = el("span", { id: "sub-health" });
  const dlq = el("div");
  const warnings = el("div");
  const limits = el("div", { id: "limits" });
  const traced = el("div", { id: "trace-result" });
  const durable = (sub.retry || {}).mode === "durable";
  const multi = (sub.clusters || []).length > 1 || (sub.clusters && sub.clusters[0] !== "default");
  const lookup = async (topic, partition, offset, cluster) => {
    const where = cluster && cluster !== "default" ? `?cluster=${encodeURIComponent(cluster)}` : "";
    const t = await api("GET", `${path}/records/${encodeURIComponent(topic)}/${partition}/${offset}${where}`);
    traced.replaceChildren(el("table", { class: "trace" }, el("tbody", {}, Object.entries(t).map(([k, v]) =>
      el("tr", {}, el("th", { text: k }), el("td", { class: k === "state" ? "" : "mono" },
        k === "state" ? badge(v) : (v === null ? "—" : (k === "next_attempt_at" ? new Date(v).toLocaleString() : String(v)))))))));
  };
  const topicIn = el("input", { id: "trace-topic", value: sub.topics[0], "aria-label": "Topic" });
  const partIn = el("input", { id: "trace-partition", type: "number", min: "0", value: "0", "aria-label": "Partition" });
  const offIn = el("input", { id: "trace-offset", type: "number", min: "0", placeholder: "offset", "aria-label": "Offset" });
  const clusterIn = el("select", { id: "trace-cluster", "aria-label": "Kafka cluster" }, (sub.clusters || ["default"]).map((c) => el("option", { value: c, text: c })));
  const traceForm = el("form", { class: "inline", on: { submit: (e) => { e.preventDefault(); lookup(topicIn.value, partIn.value, offIn.value, clusterIn.value).catch((err) => toast(err.message)); } } },
    ...(multi ? [clusterIn] : []), topicIn, partIn, offIn, el("button", { type: "submit", text: "Find record" }));
  // An action the API refuses (a read token, a conflict) says why instead of failing silently.
  const act = (label, cls, fn) => el("button", { type: "button", class: cls, text: label, on: { click: () => fn().catch((err) => { if (err.message !== "signed out") toast(`${label.replace(/…$/, "")}: ${err.message}`); }) } });
  const pauseBtn = act("Pause", "", async () => { await api("POST", path + "/pause"); toast("Paused"); refresh(); });
  const resumeBtn = act("Resume", "", async () => { await api("POST", path + "/resume"); toast("Resumed"); refresh(); });
  // With several Kafka clusters, dead letters are in each record's own cluster: one is shown at a
  // time, and a redrive, a reset or a trace names the cluster it is about.
  const clusterPick = (id, label, first) => el("select", { id, "aria-label": label },
    [...first, ...(sub.clusters || ["default"])].map((c) => el("option", { value: c, text: c || "all clusters" })));
  const dlqCluster = clusterPick("dlq-cluster", "Dead letters of Kafka cluster", []);
  const resetCluster = clusterPick("reset-cluster", "Reset offsets of Kafka cluster", [""]);
  const inCluster = (c) => (multi ? { cluster: c } : {});
  const redriveBtn = act("Redrive dead letters", "", async () => {
    const where = multi ? ` of cluster ${dlqCluster.value}` : "";
    if (!confirm(`Send the dead letters${where} through this subscription's retry topic again?`)) return;
    const r = await api("POST", path + "/dead-letters/replay", inCluster(dlqCluster.value)); toast(`Redriven: ${r.replayed}`); loadDlq();
  });
  const refresh = async () => {
    const st = await api("GET", path + "/status");
    state.replaceChildren(badge(st.state));
    body.replaceChildren(...st.partitions.map((p) => el("tr", {},
      ...(multi ? [el("td", { text: p.cluster })] : []),
      el("td", { text: p.topic }), el("td", { class: "num", text: p.partition }), el("td", { text: p.worker || "—" }),
      ...["committed", "high_watermark", "lag", "stalled_s", "in_flight", "delivered", "retried", "dead_lettered", "filtered", ...(durable ? ["deferred"] : [])].map((k) => el("td", { class: "num", text: fmt(p[k]) })))));
    warnings.replaceChildren(...(st.warnings || []).map((w) => el("p", { class: "card error", text: w })));
    const c = st.concurrency;
    limits.replaceChildren(...(c ? [
      el("h2", { text: "Concurrency" }),
      el("p", { class: "muted" }, `adaptive ${c.min}–${c.max} toward `, el("span", { class: "mono", text: c.origin }), ": the limit each worker has learnt"),
      Object.keys(c.workers).length
        ? el("table", { id: "concurrency" }, el("thead", {}, el("tr", {}, el("th", { text: "Worker" }),
          ["Limit", "In flight", "Waiting", "No-queue latency (ms)", "Overloads"].map((h) => el("th", { class: "num", text: h })), el("th", { text: "Probing" }))),
          el("tbody", {}, Object.entries(c.workers).sort().map(([w, e]) => el("tr", {}, el("td", { class: "mono", text: w }),
            ...[e.limit, e.in_flight, e.waiting, e.no_queue_latency_ms, e.overloads].map((v) => el("td", { class: "num", text: fmt(v) })),
            el("td", { text: e.probing ? "yes" : "no" })))))
        : el("p", { class: "muted", text: "No worker has pushed to it yet." }),
    ] : []));
    pauseBtn.disabled = st.state === "paused";
    resumeBtn.disabled = st.state !== "paused";
  };
  let sampleEvery = 10;
  const drawHistory = async () => {
    const h = await api("GET", path + "/history");
    sampleEvery = h.interval_s;
    healthNow.replaceChildren(healthBadge(h.health));
    const pts = h.points;
    const rates = [
      { name: "delivered/s", cls: "delivered", values: pts.map((p) => [p.t, p.delivered_per_s]) },
      { name: "retried/s", cls: "retried", values: pts.map((p) => [p.t, p.retried_per_s]) },
      { name: "dead-lettered/s", cls: "dead", values: pts.map((p) => [p.t, p.dead_lettered_per_s]) },
    ];
    const lags = [{ name: "total", cls: "lag", values: pts.map((p) => [p.t, p.lag]) },
      ...h.partitions.map((p, i) => ({ name: (multi ? p.cluster + ":" : "") + `${p.topic}/${p.partition}`, cls: "part p" + (i % 6), values: p.points.map((q) => [q.t, q.lag]) }))];
    charts.replaceChildren(
      el("h2", { text: "Throughput" }), chart("rate-chart", "Delivered, retried and dead-lettered records per second over time", rates, "/s"), legend(rates),
      el("h2", { text: "Lag" }), chart("lag-chart", "Lag over time, total and per partition", lags.slice(0, 13), "", true), legend(lags.slice(0, 13)),
      el("p", { class: "muted small", text: `Sampled every ${h.interval_s} s by the portal; the last hour is kept.` }));
  };
  // A dead letter's row looks its record up on a click, or Enter/Space when focused (keyboard use).
  const find = (d) => {
    if (multi) clusterIn.value = d.cluster; // the form then says which cluster's record is shown
    lookup(d.source_topic, d.source_partition, d.source_offset, d.cluster).catch((err) => toast(err.message));
  };
  let dlqAsked = 0; // a slower answer for the cluster picked before must not replace the newer one
  const loadDlq = async () => {
    const mine = ++dlqAsked;
    const { dead_letters } = await api("GET", path + "/dead-letters?limit=20" + (multi ? `&cluster=${encodeURIComponent(dlqCluster.value)}` : ""));
    if (mine !== dlqAsked) return;
    redriveBtn.disabled = !dead_letters.some((d) => !d.redriven);
    redriveBtn.title = redriveBtn.disabled ? "No dead letter waits for a redrive" : "";
    dlq.replaceChildren(dead_letters.length
      ? el("table", {}, el("thead", {}, el("tr", {}, ["Source", "Key", "Error", "Attempts"].map((h) => el("th", { text: h })))),
        el("tbody", {}, dead_letters.map((d) => el("tr", { class: "clickable", title: "Where is this record?", tabindex: "0", on: { click: () => find(d), keydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); find(d); } } } }, el("td", { class: "mono", text: `${d.source_topic}/${d.source_partition}/${d.source_offset}` + (d.redriven ? " (redriven)" : "") }),
          el("td", { text: d.key === null ? "(null)" : d.key }), el("td", { text: d.error || "" }), el("td", { class: "num", text: fmt(d.attempts) })))))
      : el("p", { class: "muted", text: "No dead letters." }));
  };
  dlqCluster.addEventListener("change", () => loadDlq().catch((err) => toast(err.message)));
  main.append(
    el("div", { class: "toolbar" }, el("h1", {}, sub.name, " ", state, " ", healthNow)),
    el("p", { class: "muted" }, `${sub.topics.join(", ")} → `, el("span", { class: "mono", text: sub.endpoint.url }), ` · ordering ${sub.ordering} · ${sub.max_in_flight} in flight` + (sub.concurrency ? ` · adaptive concurrency ${sub.concurrency.min}–${sub.concurrency.max}` : "") + (multi ? ` · clusters ${sub.clusters.join(", ")}` : "") + (sub.batch ? ` · batches of up to ${sub.batch.max_records} records` : "") + (sub.delay_ms ? ` · delayed ${fmt(sub.delay_ms)} ms` : "") + (durable ? " · durable retries" : "")),
    ...(sub.filter ? [el("p", { class: "muted" }, "Filter: ", el("code", { id: "sub-filter", text: JSON.stringify(sub.filter) }))] : []),
    el("div", { class: "actions" },
      pauseBtn, resumeBtn,
      el("a", { class: "button", href: `#/edit/${encodeURIComponent(name)}`, text: "Edit" }),
      act("Reset offsets…", "", async () => {
        const to = prompt("Reset to 'earliest', 'latest' or a time (ISO 8601 or epoch ms):", "latest");
        if (!to) return;
        const value = to === "earliest" || to === "latest" ? to : (/^\d+$/.test(to) ? Number(to) : Date.parse(to));
        if (Number.isNaN(value)) { toast("Not a time"); return; }
        const only = multi && resetCluster.value ? ` in cluster ${resetCluster.value}` : "";
        if (!confirm(`Reset ${name}${only} to ${to}? Delivery pauses briefly.`)) return;
        await api("POST", path + "/reset", { to: value, ...(only ? { cluster: resetCluster.value } : {}) }); toast("Offsets reset"); refresh();
      }),
      ...(multi ? [resetCluster] : []),
      act("Delete", "danger", async () => {
        if (!confirm(`Delete subscription ${name}? Its offsets stay in the offsets topic.`)) return;
        await api("DELETE", path); toast("Deleted"); location.hash = "#/subscriptions";
      })),
    warnings,
    charts,
    el("h2", { text: "Partitions" }),
    el("table", { id: "partitions" }, el("thead", {}, el("tr", {}, ...(multi ? [el("th", { text: "Cluster" })] : []), el("th", { text: "Topic" }), el("th", { class: "num", text: "Partition" }), el("th", { text: "Worker" }),
      ["Committed", "High watermark", "Lag", "Held (s)", "In flight", "Delivered", "Retried", "Dead-lettered", "Filtered", ...(durable ? ["Deferred"] : [])].map((h) =>
        el("th", { class: "num", text: h, title: h === "Held (s)" ? "Seconds the committed watermark has not moved while records wait at or above it: one record the endpoint keeps failing holds the partition (0 while it moves)" : h === "Deferred" ? "Records handed to the delay store to wait for a durable retry" : h === "Filtered" ? "Records the filter rejected: acknowledged without a push" : "" })))), body),
    limits,
    el("div", { class: "toolbar" }, el("h2", { text: "Dead letters" }), el("div", { class: "pick" }, ...(multi ? [dlqCluster] : []), redriveBtn)),
    dlq,
    el("h2", { text: "Where is my record?" }),
    el("p", { class: "muted", text: "Topic, partition and offset: its state, attempts, last answer and next attempt. Click a dead letter to look it up." }),
    traceForm, traced);
  await refresh(); loadDlq(); await drawHistory().catch(() => {});
  // The charts follow the portal's sampling: redrawn about as often as a new point arrives.
  let ticks = 0;
  const every = Math.max(1, Math.min(5, Math.round(sampleEvery / 2)));
  timer = setInterval(() => {
    refresh().catch(() => {});
    if (++ticks % every === 0) drawHistory().catch(() => {});
    if (ticks % 5 === 0) loadDlq().catch(() => {}); // new dead letters (and the redrive button) every 10 s
  }, 2000);
}

// ---- workers -------------------------------------------------------------------------------
async function workers() {
  const { workers } = await api("GET", "/workers");
  // Grouped by zone (docs/zones.md): a zone's workers push its Kafka clusters' partitions.
  const zones = [...new Set(workers.map((w) => w.zone || ""))].sort();
  // One row per partition a worker pushes; the worker's cells span its rows.
  const table = (ws) => el("table", { class: "workers" }, el("thead", {}, el("tr", {}, ["Worker", "Host", "Since", "Subscription", "Topic", "Partition", "Cluster"].map((h) => el("th", { class: h === "Partition" ? "num" : null, text: h })))),
    el("tbody", {}, ws.flatMap((w) => {
      const parts = w.partitions.length ? w.partitions : [null];
      return parts.map((p, i) => el("tr", {},
        ...(i === 0 ? [el("td", { class: "mono", rowspan: parts.length, text: w.id }), el("td", { rowspan: parts.length, text: w.host || "" }),
          el("td", { rowspan: parts.length, text: w.since ? new Date(w.since).toLocaleString() : "" })] : []),
        ...(p ? [el("td", {}, el("a", { href: `#/subscriptions/${encodeURIComponent(p.subscription)}`, text: p.subscription })), el("td", { text: p.topic }),
          el("td", { class: "num", text: p.partition }), el("td", { text: p.cluster || "default" })]
          : [el("td", { class: "muted", colspan: 4, text: "no partitions" + (w.internal_partitions ? ` (${w.internal_partitions} of Ferry's own)` : "") })])));
    })));
  main.append(el("h1", { text: "Workers" }), ...(workers.length
    ? (zones.length === 1 && zones[0] === "" ? [table(workers)] : zones.flatMap((z) => {
      const ws = workers.filter((w) => (w.zone || "") === z);
      return [el("h2", { class: "zone", text: `${z ? "Zone " + z : "No zone"} · ${ws.length} worker${ws.length === 1 ? "" : "s"}` }), table(ws)];
    }))
    : [el("p", { class: "card muted", text: "No live workers." })]));
  poll("#/workers", workers);
}

// ---- Ferry's own work: delays and transactions --------------------------------------------
async function internal() {
  const [delays, txns] = await Promise.all([api("GET", "/delays"), api("GET", "/transactions?state=prepared")]);
  const c = txns.counters;
  main.append(
    el("h1", { text: "Delays and transactions" }),
    el("div", { class: "card" }, el("h2", { text: "Delay store" }),
      el("p", {}, `${fmt(delays.scheduled)} records scheduled · next due ${delays.next_due ? new Date(delays.next_due).toLocaleString() : "—"} · p99 lateness ${delays.late_p99_ms === null ? "—" : delays.late_p99_ms + " ms"}`)),
    el("div", { class: "card" }, el("h2", { text: "Transactions waiting" }),
      el("p", {}, `checks ${fmt(c.checks)} (failed ${fmt(c.check_failures)}) · committed ${fmt(c.committed)} · rolled back ${fmt(c.rolled_back)} (since the owners started) · oldest prepared ${c.oldest_prepared_age_s.toFixed(1)} s`),
      txns.transactions.length
        ? el("table", { id: "transactions" }, el("thead", {}, el("tr", {}, ["Id", "Age (s)", "Checks", "Timeout (ms)", "Worker"].map((h) => el("th", { text: h })))),
          el("tbody", {}, txns.transactions.map((t) => el("tr", {}, el("td", { class: "mono", text: t.id }), el("td", { class: "num", text: t.age_s.toFixed(1) }),
            el("td", { class: "num", text: fmt(t.checks) }), el("td", { class: "num", text: fmt(t.timeout_ms) }), el("td", { class: "mono", text: t.worker })))))
        : el("p", { class: "muted", text: "No transaction is waiting." })));
  poll("#/internal", internal);
}

// ---- API tokens (admin) -------------------------------------------------------------------
async function tokens() {
  const listed = el("div");
  const name = el("input", { id: "t-name", type: "text", autocomplete: "off", "aria-describedby": "t-name-error" });
  const scope = el("select", { id: "t-scope" }, ["read", "produce", "admin"].map((v) => el("option", { value: v, text: v })));
  const topics = el("input", { id: "t-topics", type: "text", autocomplete: "off", "aria-describedby": "t-topics-error" });
  const errs = { name: el("div", { class: "error", id: "t-name-error" }), topics: el("div", { class: "error", id: "t-topics-error" }) };
  const general = el("div", { class: "error", id: "t-error" });
  const topicsField = el("div", { class: "field" }, el("label", { for: "t-topics", text: "Topic patterns" }), topics,
    el("div", { class: "hint", text: "comma-separated topics the token may produce to over the gateway; * matches any run of characters, e.g. orders, billing.*" }), errs.topics);
  const showTopics = () => { topicsField.hidden = scope.value !== "produce"; };
  scope.addEventListener("change", showTopics); showTopics();
  const created = el("div", { id: "t-created" });
  const form = el("form", { class: "card", novalidate: true, on: { submit: async (e) => {
    e.preventDefault();
    for (const [k, d] of Object.entries(errs)) { d.textContent = ""; (k === "name" ? name : topics).removeAttribute("aria-invalid"); }
    general.textContent = "";
    const body = { name: name.value.trim(), scope: scope.value };
    if (scope.value === "produce") body.topics = topics.value.split(",").map((t) => t.trim()).filter(Boolean);
    try {
      const t = await api("POST", "/tokens", body);
      const secret = el("code", { id: "t-secret", class: "mono", text: t.token });
      created.replaceChildren(el("div", { class: "card", role: "status" },
        el("h2", { text: `Token ${t.name} (${t.scope}) created` }),
        el("p", {}, "Copy it now: it is shown only this once. ", secret),
        el("button", { type: "button", text: "Done", on: { click: () => route() } })));
      name.value = ""; topics.value = "";
      await load();
      secret.scrollIntoView();
    } catch (err) {
      const key = err.field && (err.field === "name" ? "name" : err.field.startsWith("topics") ? "topics" : null);
      if (key) { errs[key].textContent = err.message; const i = key === "name" ? name : topics; i.setAttribute("aria-invalid", "true"); i.focus(); }
      else general.textContent = (err.field ? err.field + ": " : "") + err.message;
    }
  } } },
    el("h2", { text: "New token" }),
    el("div", { class: "grid" },
      el("div", { class: "field" }, el("label", { for: "t-name", text: "Name" }), name, el("div", { class: "hint", text: "who or what uses the token" }), errs.name),
      el("div", { class: "field" }, el("label", { for: "t-scope", text: "Scope" }), scope,
        el("div", { class: "hint", text: "read: GETs; produce: the gateway only, for the topics below; admin: everything" })),
      topicsField),
    general,
    el("div", { class: "actions" }, el("button", { class: "primary", type: "submit", text: "Create token" })));
  const revoke = (t) => el("button", { type: "button", class: "danger", disabled: t.revoked_at !== null, "aria-label": `Revoke ${t.name}`, text: "Revoke", on: { click: async () => {
    if (!confirm(`Revoke token ${t.name}? Whoever uses it is refused from now on.`)) return;
    try { await api("DELETE", `/tokens/${t.id}`); toast("Revoked"); route(); } catch (err) { toast(err.message); }
  } } });
  const when = (v) => (v ? new Date(v).toLocaleString() : "—");
  const load = async () => {
    const { tokens } = await api("GET", "/tokens");
    listed.replaceChildren(tokens.length
      ? el("table", { id: "tokens" }, el("thead", {}, el("tr", {}, ["Id", "Name", "Scope", "Topics", "Created", "Last used", "Revoked", ""].map((h) => el("th", { text: h })))),
        el("tbody", {}, tokens.map((t) => el("tr", { "data-id": t.id }, el("td", { class: "num", text: t.id }), el("td", { text: t.name }), el("td", {}, badge(t.scope)),
          el("td", { class: "mono", text: t.topics ? t.topics.join(", ") : "" }), el("td", { text: when(t.created_at) }), el("td", { text: when(t.last_used_at) }),
          el("td", { text: when(t.revoked_at) }), el("td", {}, revoke(t))))))
      : el("p", { class: "muted", text: "No tokens yet besides the bootstrap admin token." }));
  };
  await load();
  main.append(el("h1", { text: "API tokens" }), created, form, listed);
}

// ---- router --------------------------------------------------------------------------------
// Renders run one after another: a hashchange during a render waits instead of interleaving.
let routing = Promise.resolve();
function route() { routing = routing.then(render, render); return routing; }
async function render() {
  clear();
  if (!token()) return login();
  document.getElementById("nav").hidden = false;
  const h = location.hash || "#/subscriptions";
  try {
    let m;
    if (h === "#/new") await edit(null);
    else if ((m = h.match(/^#\/edit\/(.+)$/))) await edit(decodeURIComponent(m[1]));
    else if ((m = h.match(/^#\/subscriptions\/(.+)$/))) await show(decodeURIComponent(m[1]));
    else if (h === "#/workers") await workers();
    else if (h === "#/internal") await internal();
    else if (h === "#/tokens") await tokens();
    else await list();
  } catch (err) {
    if (err.message !== "signed out") main.append(el("p", { class: "card error", text: err.message }));
  }
  main.focus();
}
document.getElementById("logout").addEventListener("click", () => { sessionStorage.removeItem("ferry-token"); route(); });
window.addEventListener("hashchange", route);
route();
