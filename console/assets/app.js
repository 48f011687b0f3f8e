// The lash console: one page, routed by the URL's hash, that reads the
// JSON API (each route is a lash-admin command's --json output) and
// follows a session's live events. Text from the deployment is only ever
// set as text, never parsed as HTML.
"use strict";

const main = document.getElementById("main");
let config = { read_only: true, version: "" };
let cleanup = []; // what the current page must stop when another opens

// h makes an element: attrs are properties (on... as listeners), children
// are nodes or text.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k.startsWith("data-")) el.setAttribute(k, v);
    else el[k] = v;
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

async function api(path, opts) {
  const res = await fetch("/api" + path, opts);
  let body = null;
  try { body = await res.json(); } catch (e) { /* an empty or non-JSON answer */ }
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

const enc = encodeURIComponent;

function when(t) {
  if (!t || t.startsWith("0001-")) return "";
  return t.replace("T", " ").replace(/\.\d+/, "").replace("Z", " UTC");
}

function badge(text, cls) { return h("span", { class: "badge " + (cls || text) }, text); }

function table(headers, rows, empty) {
  if (!rows.length) return h("div", { class: "empty" }, empty || "Nothing here.");
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows));
}

function td(v, cls) { return h("td", { class: cls }, v); }

function show(...nodes) { main.replaceChildren(...nodes); }

function failure(err) { return h("div", { class: "error", role: "alert" }, err.message || String(err)); }

// poll runs load now and every few seconds while the page is open: lists
// show what lands without a reload.
function poll(load, ms) {
  let stopped = false, timer = null;
  const tick = async () => {
    try { await load(); } catch (e) { show(failure(e)); }
    if (!stopped) timer = setTimeout(tick, ms || 4000);
  };
  cleanup.push(() => { stopped = true; clearTimeout(timer); });
  tick();
}

// --- sessions ---

async function sessionsPage(q) {
  const state = q.get("state") || "";
  const label = q.get("label") || "";
  const after = q.get("after") || "";
  const limit = q.get("limit") || "50";
  // The links of this page keep its filter and page size.
  const link = (extra) => "#/sessions?" + new URLSearchParams(Object.assign({}, state ? { state } : {}, label ? { label } : {}, limit !== "50" ? { limit } : {}, extra || {}));
  // A label links to the sessions that carry it.
  const labels = (ls) => Object.entries(ls || {}).map(([k, v]) => h("a", { class: "label", href: "#/sessions?" + new URLSearchParams({ label: k + "=" + v }) }, k + "=" + v));
  const filter = h("select", { id: "state-filter", onchange: (e) => { location.hash = "#/sessions?" + new URLSearchParams(e.target.value ? { state: e.target.value } : {}); } },
    ["", "idle", "running", "waiting", "failed"].map((s) => h("option", { value: s, selected: s === state }, s || "all states")));
  poll(async () => {
    const params = new URLSearchParams({ limit });
    if (state) params.set("state", state);
    if (label) params.set("label", label);
    if (after) params.set("after", after);
    const d = await api("/sessions?" + params);
    const rows = d.sessions.map((s) => h("tr", { "data-session": s.session },
      td(h("a", { href: "#/sessions/" + enc(s.session) }, s.session), "mono"),
      td(badge(s.state)), td(when(s.active)), td(when(s.created)),
      td(s.turns, "num"), td(s.last_turn, "mono"), td(s.termination.reason || ""),
      td(s.usage.input_tokens + s.usage.output_tokens, "num"), td(s.pending_inputs, "num"), td(s.suspended, "num"),
      td(s.agent ? h("a", { href: "#/agents/" + enc(s.agent.split("@")[0]) }, s.agent) : "default", "mono"), td(h("span", {}, ...labels(s.labels)))));
    const next = d.next ? h("a", { id: "next-page", href: link({ after: d.next }) }, "Next page →") : null;
    show(h("h1", {}, "Sessions"), h("div", { class: "toolbar" }, filter, label ? h("a", { id: "label-filter", href: "#/sessions" }, "label " + label + " ✕") : null,
      after ? h("a", { id: "first-page", href: link() }, "← First page") : null),
      table(["Session", "State", "Last active", "Created", "Turns", "Last turn", "Termination", "Tokens", "Pending", "Suspended", "Agent", "Labels"], rows,
        "No sessions" + (state ? " in state " + state : "") + (label ? " labelled " + label : "") + "."),
      h("p", {}, next));
  });
}

function content(m) {
  if (m.role === "tool") {
    const mark = m.pending ? " (pending)" : m.error ? " (failed)" : "";
    return (m.name || "tool") + " → " + m.text + mark;
  }
  const calls = (m.tool_calls || []).map((c) => "→ " + c.name + " " + c.arguments);
  return [m.text, ...calls].filter(Boolean).join("\n");
}

function message(m) {
  return h("div", { class: "msg " + m.role, "data-turn": m.turn }, h("span", { class: "role" }, m.role + (m.turn ? " · " + m.turn : "")), content(m));
}

async function sessionPage(id) {
  const head = h("div", {}), calls = h("div", { id: "calls" }), transcript = h("div", { class: "transcript", id: "transcript" });
  const stream = h("div", { class: "msg assistant streaming", id: "stream", hidden: true });
  const turns = h("div", { id: "turns" }), status = h("p", { class: "muted", id: "live-status" }, "connecting to live events…");
  show(h("h1", {}, "Session ", h("span", { class: "mono" }, id)), head, h("h2", {}, "Waiting on a decision"), calls,
    h("h2", {}, "Transcript"), transcript, stream, status, h("h2", {}, "Turns"), turns);

  const load = async () => {
    const [s, t, ts] = await Promise.all([api("/sessions/" + enc(id)), api("/sessions/" + enc(id) + "/transcript"), api("/sessions/" + enc(id) + "/turns")]);
    head.replaceChildren(h("dl", { class: "summary" },
      h("dt", {}, "state"), h("dd", { id: "session-state" }, badge(s.state)),
      h("dt", {}, "agent"), h("dd", { id: "session-agent" }, s.agent || "default"),
      ...(s.labels ? [h("dt", {}, "labels"), h("dd", {}, Object.entries(s.labels).map(([k, v]) => k + "=" + v).join(", "))] : []),
      ...(s.parent ? [h("dt", {}, "sub-agent of"), h("dd", {}, h("a", { href: "#/sessions/" + enc(s.parent) }, s.parent), " (process " + s.process + ")")] : []),
      h("dt", {}, "status"), h("dd", {}, s.status + (s.termination.reason ? " · " + s.termination.reason : "")),
      h("dt", {}, "last active"), h("dd", {}, when(s.active)),
      h("dt", {}, "turns"), h("dd", {}, s.turns + (s.last_turn ? " (last " + s.last_turn + ")" : "")),
      h("dt", {}, "tokens"), h("dd", {}, s.usage.input_tokens + " in, " + s.usage.output_tokens + " out"),
      h("dt", {}, "inputs"), h("dd", {}, s.inputs + " appended, " + s.pending_inputs + " pending")));
    calls.replaceChildren(...(s.suspended_calls.length ? s.suspended_calls.map((c) => suspended(id, c, load)) : [h("div", { class: "empty" }, "No call is waiting.")]));
    transcript.replaceChildren(...(t.messages.length ? t.messages.map(message) : [h("div", { class: "empty" }, "No committed messages yet.")]));
    turns.replaceChildren(table(["Turn", "Status", "Termination", "Took", "Tokens", "Model calls", "Committed by", "Committed"],
      ts.turns.map((x) => h("tr", {},
        td(h("a", { href: "#/sessions/" + enc(id) + "/turns/" + enc(x.turn) }, x.turn), "mono"), td(x.status), td(x.termination.reason || ""),
        td(x.duration_ms ? x.duration_ms.toFixed(1) + " ms" : "", "num"), td(x.usage.input_tokens + x.usage.output_tokens, "num"),
        td(x.iterations, "num"), td(x.committer, "mono"), td(when(x.committed)))), "No committed turns yet."));
  };
  try { await load(); } catch (e) { show(failure(e)); return; }

  // Live events after what was just read; a reload after each commit
  // shows the committed truth, the deltas only what streams meanwhile.
  let pending = null;
  const reload = () => { clearTimeout(pending); pending = setTimeout(() => load().catch((e) => status.replaceChildren(failure(e))), 100); };
  const es = new EventSource("/api/sessions/" + enc(id) + "/live?from=now");
  cleanup.push(() => es.close());
  es.addEventListener("open", () => { status.textContent = "following live events"; });
  es.addEventListener("behind", () => { status.textContent = "some live events were no longer kept; the transcript holds the facts"; reload(); });
  es.addEventListener("failed", (e) => { status.textContent = "live events: " + JSON.parse(e.data).error + "; reconnecting"; });
  es.onerror = () => { status.textContent = "live events disconnected; reconnecting"; };
  es.onmessage = (e) => {
    const ev = JSON.parse(e.data);
    if (ev.type !== "turn_committed" && ev.type !== "turn_failed") {
      document.getElementById("session-state").replaceChildren(badge("running"));
    }
    switch (ev.type) {
      case "text_delta":
        stream.hidden = false;
        stream.textContent += ev.text;
        status.textContent = "streaming " + (ev.turn || "");
        break;
      case "message":
        if (ev.message && ev.message.role === "assistant") { stream.hidden = true; stream.textContent = ""; }
        transcript.append(message(Object.assign({ turn: ev.turn }, ev.message)));
        break;
      case "turn_committed":
      case "turn_failed":
        stream.hidden = true; stream.textContent = "";
        status.textContent = ev.type.replace("_", " ") + " " + (ev.turn || "");
        reload();
        break;
      default:
        if (ev.type) status.textContent = ev.type.replace(/_/g, " ") + (ev.name ? " " + ev.name : "");
    }
  };
}

function suspended(id, c, reload) {
  // One key per decision shown: a retried click is the same decision.
  const key = "console-" + (crypto.randomUUID ? crypto.randomUUID() : Date.now() + "-" + Math.random()).replace(/[^A-Za-z0-9-]/g, "");
  const note = h("span", { class: "muted" });
  const decide = async (action, btns) => {
    btns.forEach((b) => { b.disabled = true; });
    try {
      await api("/sessions/" + enc(id) + "/decide", { method: "POST", headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ call_id: c.call_id, action, key }) });
      note.textContent = action === "approve" ? "approved; the turn resumes" : "denied; the turn resumes without it";
      setTimeout(() => reload().catch(() => {}), 300);
    } catch (e) {
      note.replaceChildren(failure(e));
      btns.forEach((b) => { b.disabled = false; });
    }
  };
  const approve = h("button", { class: "approve", "data-call": c.call_id }, "Approve");
  const deny = h("button", { class: "deny", "data-call": c.call_id }, "Deny");
  approve.addEventListener("click", () => decide("approve", [approve, deny]));
  deny.addEventListener("click", () => decide("deny", [approve, deny]));
  return h("div", { class: "call", "data-call": c.call_id },
    h("div", {}, h("strong", {}, c.tool), " ", h("span", { class: "mono" }, c.arguments)),
    h("div", { class: "muted" }, c.ticket.reason, " · call ", h("span", { class: "mono" }, c.call_id)),
    config.read_only ? h("div", { class: "muted" }, "read-only console: decide with lash-admin decide") : h("div", { class: "actions" }, approve, deny, note));
}

// --- a turn's journal ---

async function journalPage(id, tid) {
  poll(async () => {
    const d = await api("/sessions/" + enc(id) + "/turns/" + enc(tid) + "/effects");
    // A Gantt row per effect: it ran from its record's time less what it
    // took, on the span from the first start to the last record.
    const end = (e) => Date.parse(e.recorded_at), start = (e) => end(e) - e.took_ms;
    const t0 = Math.min(...d.effects.map(start)), span = Math.max(1, Math.max(...d.effects.map(end)) - t0);
    const rows = d.effects.map((e) => {
      const run = e.in_doubt ? badge("started, no outcome", "indoubt") : e.replayed ? badge("replayed") : e.executed ? badge("executed") : badge("uncommitted", "idle");
      return h("tr", { "data-key": e.key },
        td(e.key.split("/").slice(2).join("/") || e.key, "mono"), td(e.kind), td(e.summary), td(run),
        td(e.recorder, "mono"), td(e.took_ms.toFixed(1) + " ms", "num"),
        h("td", { class: "track" }, h("div", { class: "bar" + (e.replayed ? " replayed" : ""),
          style: "margin-left:" + (100 * (start(e) - t0) / span).toFixed(2) + "%;width:" + Math.max(0.5, 100 * e.took_ms / span).toFixed(2) + "%" })),
        td(when(e.recorded_at)));
    });
    show(h("h1", {}, "Turn ", h("span", { class: "mono" }, tid), " of ", h("a", { href: "#/sessions/" + enc(id), class: "mono" }, id)),
      h("p", { class: "muted" }, d.committed ? "Committed. Replayed effects were recorded by an earlier run and taken from the journal; executed ones were run by the committing run." : "Not committed yet. A call started with no outcome is running, or in doubt if the run that started it is gone: the next run tells the tool so."),
      h("div", { class: "timeline" }, table(["Effect", "Kind", "Outcome", "Run", "Recorder", "Took", "", "Recorded"], rows, "The journal of this turn is empty (purged or past its retention).")));
  });
}

// --- the deployment ---

async function quarantinePage() {
  poll(async () => {
    const d = await api("/quarantine");
    show(h("h1", {}, "Quarantine"), h("p", { class: "muted" }, "Messages set aside as malformed: they changed nothing and wait for an operator."),
      table(["Stream", "Seq", "Subject", "Fold", "Payload", "Reason"], d.quarantine.map((p) => h("tr", {},
        td(p.stream), td(p.seq, "num"), td(p.subject, "mono"), td(p.fold), td(p.preview, "mono"), td(p.reason))), "Nothing is quarantined."));
  });
}

async function nodesPage() {
  poll(async () => {
    const [n, l] = await Promise.all([api("/nodes"), api("/leases")]);
    show(h("h1", {}, "Nodes"),
      table(["Node", "Incarnation", "Host", "PID", "Leases", "Last beat", "Expires"], n.nodes.map((x) => h("tr", { "data-node": x.node },
        td(x.node, "mono"), td(x.incarnation, "mono"), td(x.host), td(x.pid, "num"), td(x.leases, "num"), td(when(x.beat)), td(when(x.expires)))), "No live node."),
      h("h2", {}, "Leases"),
      table(["Kind", "Id", "Holder", "Node live", "Token", "Renewed", "Expires"], l.leases.map((x) => h("tr", {},
        td(x.kind), td(x.id, "mono"), td(x.holder, "mono"), td(x.node_live ? "yes" : badge("no", "failed")), td(x.token, "num"), td(when(x.renewed)), td(when(x.expires)))), "No lease is held."));
  });
}

async function processesPage(q) {
  const status = q.get("status") || "";
  poll(async () => {
    const d = await api("/processes" + (status ? "?status=" + enc(status) : ""));
    show(h("h1", {}, "Processes"),
      table(["Process", "Status", "Kind", "What", "Session", "Wake", "Attempts", "Registered", "Ended", "Error"], d.processes.map((p) => h("tr", {},
        td(p.id, "mono"), td(badge(p.status, "idle")), td(p.kind), td(p.label || p.what), td(p.session || "", "mono"), td(p.wake_target || "", "mono"),
        td(p.attempts, "num"), td(when(p.registered)), td(when(p.ended)), td(p.error || ""))), "No processes."));
  });
}

async function triggersPage() {
  poll(async () => {
    const [t, dl] = await Promise.all([api("/triggers"), api("/triggers/deliveries")]);
    show(h("h1", {}, "Triggers"),
      table(["Subscription", "Owner", "Key", "Source", "Starts", "State", "Changed"], t.subscriptions.map((s) => h("tr", {},
        td(s.id, "mono"), td(s.owner.kind === "session" ? "session " + s.owner.id : s.owner.kind), td(s.key), td(s.source, "mono"), td(s.start), td(badge(s.state, s.state === "enabled" ? "executed" : "idle")), td(when(s.changed)))), "No subscriptions."),
      h("h2", {}, "Deliveries"),
      table(["Delivery", "Subscription", "Occurrence", "Process", "State", "Reserved"], dl.deliveries.map((x) => h("tr", {},
        td(x.id, "mono"), td(x.subscription, "mono"), td(x.occurrence, "mono"), td(x.process, "mono"),
        td(x.error ? badge("refused", "failed") : x.started ? badge("started", "executed") : badge("reserved", "waiting")), td(when(x.reserved)))), "No deliveries."));
  });
}

async function agentsPage() {
  poll(async () => {
    const d = await api("/agents");
    show(h("h1", {}, "Agents"),
      table(["Agent", "Revision", "Version", "Provider", "Model", "Tools", "Labels", "Changed"], d.agents.map((g) => h("tr", { "data-agent": g.name },
        td(h("a", { href: "#/agents/" + enc(g.name) }, g.name)), td(g.revision, "num"), td(g.version.slice(0, 12), "mono"), td(g.provider), td(g.model, "mono"),
        td((g.tools || []).join(", ")), td(Object.entries(g.labels || {}).map(([k, v]) => k + "=" + v).join(", ")), td(when(g.changed)))),
        "No agents: lash-admin agents apply -f FILE makes one."));
  });
}

async function agentPage(name) {
  poll(async () => {
    const [a, hist] = await Promise.all([api("/agents/" + enc(name)), api("/agents/" + enc(name) + "/history")]);
    const d = a.definition;
    const p = d.parameters || {}, l = d.limits || {}, sa = d.sub_agents || {};
    const rows = [["Revision", a.revision], ["Version", a.version], ["Provider", d.provider], ["Model", d.model],
      ["Tools", (d.tools || []).join(", ") || "none"], ["Description", d.description || ""],
      ["Parameters", Object.entries(p).map(([k, v]) => k + "=" + v).join(", ")],
      ["Limits", Object.entries(l).map(([k, v]) => k + "=" + v).join(", ")],
      ["Sub-agents", (sa.agents || []).join(", ") + (sa.max_depth ? " (depth " + sa.max_depth + ")" : "")]];
    show(h("h1", {}, "Agent " + name),
      h("dl", { class: "summary" }, rows.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, String(v))])),
      h("h2", {}, "Instructions"), h("pre", { id: "instructions" }, d.instructions || ""),
      h("h2", {}, "History"),
      table(["Revision", "Version", "Action", "By", "At"], hist.revisions.map((r) => h("tr", {},
        td(r.revision, "num"), td((r.version || "").slice(0, 12), "mono"), td(r.action), td(r.by), td(when(r.at))))));
  });
}

// --- routing ---

function route() {
  cleanup.forEach((f) => f());
  cleanup = [];
  const [path, query] = (location.hash.slice(1) || "/sessions").split("?");
  const q = new URLSearchParams(query || "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  document.querySelectorAll("nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === parts[0]));
  show(h("p", { class: "muted" }, "Loading…"));
  let page;
  switch (parts[0]) {
    case "sessions":
      if (parts.length === 1) page = sessionsPage(q);
      else if (parts.length === 2) page = sessionPage(parts[1]);
      else if (parts.length === 4 && parts[2] === "turns") page = journalPage(parts[1], parts[3]);
      break;
    case "quarantine": page = quarantinePage(); break;
    case "nodes": page = nodesPage(); break;
    case "processes": page = processesPage(q); break;
    case "triggers": page = triggersPage(); break;
    case "agents": page = parts.length === 2 ? agentPage(parts[1]) : agentsPage(); break;
  }
  if (!page) { show(failure(new Error("No page " + location.hash))); return; }
  page.catch((e) => show(failure(e)));
}

(async () => {
  try { config = await api("/config"); } catch (e) { /* read-only until known */ }
  document.getElementById("mode").textContent = (config.read_only ? "read-only · " : "") + (config.version || "");
  window.addEventListener("hashchange", route);
  route();
})();
