// The collector's service map page (docs/ui.md). It asks only its own
// origin, with relative URLs (api/v1/graph, api/v1/flows), so that it works
// on the collector's --ui-listen, on flowlens ui's local port and behind a
// path prefix; it fetches nothing else (the bundle carries Cytoscape.js).
import cytoscape from "cytoscape";

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 5000;

const state = {
  graph: null, // the last answer, as drawn (after expanding workloads)
  expanded: new Set(), // workload ids shown as their pods
  layoutKey: "", // the node ids of the last layout: a new set lays out again
  timer: 0,
  seq: 0, // answers to older requests are dropped
  lastTap: null, // {id, t}: the last node clicked, for double clicks
};

const cy = cytoscape({
  container: $("graph"),
  minZoom: 0.2,
  maxZoom: 3,
  style: [
    { selector: "node[size]", style: {
      label: "data(label)", "font-size": 11, "text-valign": "bottom", "text-margin-y": 4,
      "background-color": "#4a78c2", width: "data(size)", height: "data(size)", color: "#1d2330",
      "text-background-color": "#fff", "text-background-opacity": 0.8, "text-background-padding": 1,
    } },
    { selector: "node.pod", style: { "background-color": "#7fa3dc", shape: "round-rectangle" } },
    { selector: "node.service", style: { "background-color": "#2e9c8a", shape: "diamond" } },
    { selector: "node.node", style: { "background-color": "#8a6bbf", shape: "hexagon" } },
    { selector: "node.external", style: { "background-color": "#9aa3af", shape: "round-triangle" } },
    { selector: "node.bad", style: { "border-width": 3, "border-color": "#c0392b" } },
    { selector: "node.namespace", style: {
      label: "data(label)", "text-valign": "top", "text-halign": "center", "font-size": 12, "font-weight": 600,
      "background-color": "#eef2f8", "background-opacity": 1, "border-width": 1, "border-color": "#b8c4d6",
      shape: "round-rectangle", padding: 18, color: "#3b4a63",
    } },
    { selector: "edge", style: {
      width: "data(width)", "line-color": "data(color)", "target-arrow-color": "data(color)",
      "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.9, opacity: 0.85,
      label: "data(label)", "font-size": 9, color: "#5b6473", "text-rotation": "autorotate", "text-margin-y": -8,
    } },
    { selector: ":selected", style: { "overlay-color": "#1d2330", "overlay-opacity": 0.12, "overlay-padding": 5 } },
    { selector: ".dim", style: { opacity: 0.15 } },
    { selector: ".hit", style: { "border-width": 3, "border-color": "#f1c40f" } },
  ],
});

// ---- the query ----

function rfc3339(local) {
  return local ? new Date(local).toISOString() : "";
}

// params are the window and filters of the controls (both endpoints).
function params(extra) {
  const p = new URLSearchParams();
  const w = $("window").value;
  if (w === "custom") {
    const since = rfc3339($("since").value), until = rfc3339($("until").value);
    if (since) p.set("since", since);
    if (until) p.set("until", until);
  } else {
    p.set("since", w);
  }
  for (const k of ["namespace", "workload", "port"]) {
    const v = $(k).value.trim();
    if (v) p.set(k, v);
  }
  if ($("protocol").value) p.set("protocol", $("protocol").value);
  if ($("unhealthy").checked) p.set("only_unhealthy", "true");
  for (const [k, v] of Object.entries(extra || {})) p.set(k, v);
  return p;
}

async function getJSON(path, p) {
  const resp = await fetch(path + "?" + p.toString(), { headers: { Accept: "application/json" } });
  let body;
  try {
    body = await resp.json();
  } catch (e) {
    throw new Error(`${path}: ${resp.status} ${resp.statusText}`);
  }
  if (!resp.ok) throw new Error(body.error || `${path}: ${resp.status}`);
  return body;
}

// ---- expanding workloads to pods ----

// expand answers the workload graph, with the pods of the expanded
// workloads in place of them: from the pod graph, every other pod folded
// back into its workload and the edges summed again.
function expand(pods) {
  const nodes = new Map(), edges = new Map();
  const owner = (n) => (n.kind === "pod" && n.workload
    ? `workload:${n.namespace}/${n.workload_kind}/${n.workload}` : "");
  const fold = (n) => {
    const w = owner(n);
    if (!w || state.expanded.has(w)) return n;
    return { id: w, kind: "workload", namespace: n.namespace, name: n.workload, workload_kind: n.workload_kind };
  };
  const byId = new Map(pods.nodes.map((n) => [n.id, n]));
  for (const n of pods.nodes) {
    const f = fold(n);
    if (!nodes.has(f.id)) nodes.set(f.id, { ...f, bytes: 0, packets: 0, drop_packets: 0 });
    if (f !== n) continue;
    nodes.get(f.id).expandedFrom = owner(n);
  }
  for (const e of pods.edges) {
    const s = fold(byId.get(e.source)).id, t = fold(byId.get(e.target)).id;
    const k = s + "\u2192" + t;
    let a = edges.get(k);
    if (!a) {
      a = { ...e, source: s, target: t, drop_causes: { ...(e.drop_causes || {}) }, ports: [...(e.ports || [])], protocols: [...(e.protocols || [])] };
      edges.set(k, a);
    } else {
      for (const f of ["bytes", "packets", "flows", "drop_packets", "retransmits", "failed_connects"]) a[f] = (a[f] || 0) + (e[f] || 0);
      for (const [c, v] of Object.entries(e.drop_causes || {})) a.drop_causes[c] = (a.drop_causes[c] || 0) + v;
      a.rtt_p50_ns = Math.max(a.rtt_p50_ns, e.rtt_p50_ns); // an upper bound of the medians
      a.ports = [...new Set([...a.ports, ...(e.ports || [])])];
      a.protocols = [...new Set([...a.protocols, ...(e.protocols || [])])];
      a.unhealthy = a.unhealthy || e.unhealthy;
    }
  }
  for (const e of edges.values()) {
    for (const id of [e.source, e.target]) {
      const n = nodes.get(id);
      n.bytes += e.bytes; n.packets += e.packets; n.drop_packets += e.drop_packets;
    }
  }
  return { ...pods, nodes: [...nodes.values()], edges: [...edges.values()] };
}

// ---- drawing ----

function edgeId(e) {
  return e.source + "\u2192" + e.target;
}

function health(e) {
  if (e.drop_packets > 0 || e.failed_connects > 0) return "#c0392b"; // drops, failed connects
  if (e.unhealthy) return "#e67e22"; // high RTT, retransmits
  return "#6b9e5e";
}

function elements(g) {
  const maxBytes = Math.max(1, ...g.edges.map((e) => e.bytes));
  const maxNode = Math.max(1, ...g.nodes.map((n) => n.bytes));
  const out = [];
  const namespaces = new Set();
  for (const n of g.nodes) {
    if (n.namespace) namespaces.add(n.namespace);
    const label = n.kind === "workload" || n.kind === "pod" ? n.name : externalLabel(n);
    out.push({
      group: "nodes",
      data: { id: n.id, parent: n.namespace ? "ns:" + n.namespace : undefined, label,
        size: 18 + 22 * Math.sqrt(n.bytes / maxNode), node: n },
      classes: n.kind + (n.drop_packets > 0 ? " bad" : ""),
    });
  }
  for (const ns of [...namespaces].sort()) {
    out.push({ group: "nodes", data: { id: "ns:" + ns, label: ns, namespace: ns }, classes: "namespace" });
  }
  for (const e of g.edges) {
    out.push({
      group: "edges",
      data: { id: edgeId(e), source: e.source, target: e.target, color: health(e), label: fmtBytes(e.bytes),
        width: 1.5 + 8 * Math.sqrt(e.bytes / maxBytes), edge: e },
    });
  }
  return out;
}

// externalLabel names an external node by the DNS names its addresses
// were answered for (the first, and how many more), else its subnet.
function externalLabel(n) {
  const names = n.dns_names || [];
  if (!names.length) return n.name || n.id;
  return names[0] + (names.length > 1 ? ` +${names.length - 1}` : "");
}

function draw(g) {
  state.graph = g;
  const key = g.nodes.map((n) => n.id).sort().join("\n") + "\n--\n" + g.edges.map(edgeId).sort().join("\n");
  const selected = cy.$(":selected").map((el) => el.id());
  if (key === state.layoutKey) {
    // Same picture: only the numbers (and so colours and widths) moved.
    for (const el of elements(g)) {
      const c = cy.getElementById(el.data.id);
      c.data(el.data);
      if (el.classes !== undefined) c.classes(el.classes);
    }
  } else {
    state.layoutKey = key;
    cy.elements().remove();
    cy.add(elements(g));
    arrange();
    for (const id of selected) cy.getElementById(id).select();
  }
  search();
  status(g);
}

// arrange places each namespace's nodes in a small grid of their own
// (the nodes without a namespace grouped by kind) and the groups around a
// ring, in id order: the same graph is drawn the same way every time, no
// group overlaps another, and the edges between groups are chords that
// pass beside the groups rather than through them (a force layout does
// these only by chance).
function arrange() {
  const STEP_X = 140, STEP_Y = 100, GAP = 120;
  const groups = new Map();
  for (const n of cy.nodes().not(".namespace")) {
    const d = n.data("node");
    const key = d.namespace ? "0 " + d.namespace : "1 " + d.kind;
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(n);
  }
  const list = [...groups.keys()].sort().map((key) => {
    const members = groups.get(key).sort((a, b) => (a.id() < b.id() ? -1 : 1));
    const cols = Math.ceil(Math.sqrt(members.length)), rows = Math.ceil(members.length / cols);
    return { members, cols, w: (cols - 1) * STEP_X, h: (rows - 1) * STEP_Y };
  });
  const around = list.reduce((sum, g) => sum + Math.max(g.w, g.h) + GAP, 0);
  const r = list.length > 1 ? Math.max(180, around / (2 * Math.PI)) : 0;
  list.forEach((g, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / list.length;
    const cx = r * Math.cos(a) - g.w / 2, cy0 = r * Math.sin(a) - g.h / 2;
    g.members.forEach((n, j) => n.position({ x: cx + (j % g.cols) * STEP_X, y: cy0 + Math.floor(j / g.cols) * STEP_Y }));
  });
  cy.fit(undefined, 50);
  if (cy.zoom() > 1.4) {
    cy.zoom(1.4);
    cy.center();
  }
}

function status(g, err) {
  const el = $("status");
  if (err) {
    el.textContent = "error: " + err.message;
    el.className = "err";
    return;
  }
  el.className = "";
  const w = `${fmtTime(g.window.since)} – ${fmtTime(g.window.until)}`;
  let s = `${g.nodes.length} nodes, ${g.edges.length} edges from ${g.flows} flows, ${w}`;
  if (g.collectors) s += `, ${g.collectors} collectors`;
  if (g.truncated) s += ` — truncated: ${g.omitted_nodes} nodes and ${g.omitted_edges} edges left out (narrow the filters)`;
  s += ` · updated ${new Date().toLocaleTimeString()}`;
  el.textContent = s;
}

// ---- search ----

function search() {
  const q = $("search").value.trim().toLowerCase();
  cy.elements().removeClass("dim hit");
  if (!q) return;
  const hits = cy.nodes().not(".namespace").filter((n) => {
    const d = n.data("node");
    return [d.id, d.name, d.namespace, d.workload, ...(d.dns_names || [])].some((s) => s && s.toLowerCase().includes(q));
  });
  cy.elements().not(".namespace").addClass("dim");
  hits.removeClass("dim").addClass("hit");
  hits.connectedEdges().removeClass("dim");
}

// ---- details ----

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function fmtBytes(n) {
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + u[i];
}

function fmtRTT(ns) {
  return ns ? (ns / 1e6).toFixed(ns < 1e7 ? 2 : 0) + " ms" : "–";
}

function fmtTime(t) {
  return t ? new Date(t).toLocaleTimeString() : "";
}

function causes(c) {
  const e = Object.entries(c || {});
  return e.length ? e.map(([k, v]) => `${esc(k)} ${v}`).join(", ") : "";
}

function k8s(m) {
  if (!m || !m.kind) return "";
  if (m.kind === "pod") return `pod ${esc(m.namespace)}/${esc(m.name)}` + (m.workload ? ` (${esc(m.workload_kind)} ${esc(m.workload)})` : "");
  if (m.kind === "service") return `service ${esc(m.namespace)}/${esc(m.name)}`;
  if (m.kind === "node") return `node ${esc(m.name)}`;
  return esc(m.subnet || m.kind);
}

function endpoint(addr, port) {
  if (!port) return esc(addr);
  return addr && addr.includes(":") ? `[${esc(addr)}]:${port}` : `${esc(addr)}:${port}`;
}

const PROTO = { 1: "icmp", 6: "tcp", 17: "udp", 58: "icmpv6", 132: "sctp" };

async function showEdge(e) {
  const d = $("details");
  d.innerHTML = `<h2>${esc(e.source)} → ${esc(e.target)}</h2>
<table>
<tr><th>bytes</th><td class="n">${fmtBytes(e.bytes)}</td><th>packets</th><td class="n">${e.packets}</td></tr>
<tr><th>flows</th><td class="n">${e.flows}</td><th>RTT p50</th><td class="n">${fmtRTT(e.rtt_p50_ns)}</td></tr>
<tr><th>drops</th><td class="n ${e.drop_packets ? "bad" : ""}">${e.drop_packets}</td><th>retransmits</th><td class="n">${e.retransmits}</td></tr>
<tr><th>failed connects</th><td class="n ${e.failed_connects ? "bad" : ""}">${e.failed_connects || 0}</td><th>ports</th><td>${esc((e.ports || []).join(", "))} ${esc((e.protocols || []).join(", "))}</td></tr>
${e.drop_packets ? `<tr><th>drop causes</th><td colspan="3" class="bad">${causes(e.drop_causes)}</td></tr>` : ""}
</table>
<h2>flows, newest first</h2><div id="flows">loading…</div>`;
  try {
    const fl = await getJSON("api/v1/flows", params({ source: e.source, target: e.target, last: "100" }));
    const list = $("flows");
    if (!list) return; // another click replaced the panel
    if (!fl.flows.length) {
      list.textContent = "no flows in the window";
      return;
    }
    list.innerHTML = fl.flows.map((f) => `<div class="flow">
<div><b>${endpoint(f.src_addr, f.src_port)} → ${endpoint(f.dst_addr, f.dst_port)}</b> ${esc(PROTO[f.proto] || f.proto)}</div>
<div>${fmtTime(f.start_time)} – ${fmtTime(f.end_time)} · ${fmtBytes(f.bytes || 0)}, ${f.packets || 0} packets${f.rtt_ns ? ", RTT " + fmtRTT(f.rtt_ns) : ""}${f.drop_packets ? ` · <span class="bad">${f.drop_packets} dropped ${esc(f.drop_cause || "")}</span>` : ""}</div>
<div class="k8s">${k8s(f.src_k8s)} → ${k8s(f.dst_k8s)}${f.node_name ? " · on " + esc(f.node_name) : ""}</div>
</div>`).join("") + (fl.truncated ? `<p class="hint">${fl.matched} flows matched; the newest ${fl.flows.length} shown.</p>` : "");
  } catch (err) {
    const list = $("flows");
    if (list) list.textContent = "error: " + err.message;
  }
}

function showNode(n) {
  const g = state.graph;
  const peers = [];
  for (const e of g.edges) {
    if (e.source === n.id) peers.push({ dir: "→", peer: e.target, e });
    if (e.target === n.id) peers.push({ dir: "←", peer: e.source, e });
  }
  peers.sort((a, b) => b.e.bytes - a.e.bytes);
  const name = (id) => {
    const p = g.nodes.find((x) => x.id === id);
    return p ? (p.namespace ? p.namespace + "/" : "") + (p.name || p.id) : id;
  };
  $("details").innerHTML = `<h2>${esc(n.id)}</h2>
<table>
<tr><th>kind</th><td>${esc(n.kind)}${n.workload_kind ? " (" + esc(n.workload_kind) + ")" : ""}</td></tr>
${n.namespace ? `<tr><th>namespace</th><td>${esc(n.namespace)}</td></tr>` : ""}
${(n.dns_names || []).length ? `<tr><th>DNS names</th><td id="dns-names">${n.dns_names.map(esc).join(", ")}</td></tr>` : ""}
<tr><th>bytes</th><td class="n">${fmtBytes(n.bytes)}</td></tr>
<tr><th>packets</th><td class="n">${n.packets}</td></tr>
<tr><th>dropped packets</th><td class="n ${n.drop_packets ? "bad" : ""}">${n.drop_packets}</td></tr>
</table>
<h2>peers (${peers.length})</h2>
<table id="peers"><tr><th></th><th>peer</th><th>bytes</th><th>packets</th><th>drops</th></tr>
${peers.map((p) => `<tr><td>${p.dir}</td><td>${esc(name(p.peer))}</td><td class="n">${fmtBytes(p.e.bytes)}</td><td class="n">${p.e.packets}</td><td class="n ${p.e.drop_packets ? "bad" : ""}">${p.e.drop_packets}</td></tr>`).join("")}
</table>`;
}

cy.on("tap", "edge", (ev) => showEdge(ev.target.data("edge")));
// A click shows a node; a second click on the same node within 400 ms
// opens a workload into its pods, or folds a pod back. (Cytoscape's own
// dbltap pairs any two taps, on different nodes too.)
cy.on("tap", "node", (ev) => {
  const n = ev.target.data("node");
  if (!n) return;
  const now = performance.now(), last = state.lastTap;
  state.lastTap = { id: n.id, t: now };
  if (last && last.id === n.id && now - last.t < 400) {
    state.lastTap = null;
    if (n.kind === "workload") state.expanded.add(n.id);
    else if (n.expandedFrom) state.expanded.delete(n.expandedFrom);
    else return;
    refresh();
    return;
  }
  showNode(n);
});

// ---- refreshing ----

async function refresh() {
  const seq = ++state.seq;
  try {
    const podsWanted = $("pods").checked;
    let g;
    if (!podsWanted && state.expanded.size > 0) {
      g = expand(await getJSON("api/v1/graph", params({ pods: "true" })));
    } else {
      g = await getJSON("api/v1/graph", params(podsWanted ? { pods: "true" } : {}));
    }
    if (seq !== state.seq) return;
    draw(g);
  } catch (err) {
    if (seq === state.seq) status(null, err);
  }
}

function schedule() {
  clearInterval(state.timer);
  state.timer = $("live").checked ? setInterval(refresh, REFRESH_MS) : 0;
}

$("window").addEventListener("change", () => {
  $("custom").hidden = $("window").value !== "custom";
  if ($("window").value === "custom" && !$("since").value) {
    const pad = (d) => new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
    $("since").value = pad(new Date(Date.now() - 5 * 60000));
    $("until").value = pad(new Date());
  }
  refresh();
});
for (const id of ["since", "until", "namespace", "workload", "port", "protocol", "unhealthy", "pods"]) {
  $(id).addEventListener("change", refresh);
}
$("controls").addEventListener("submit", (ev) => { ev.preventDefault(); refresh(); });
$("live").addEventListener("change", schedule);
$("search").addEventListener("input", search);

// The browser test (internal/collector/ui_browser_test.go) reads the graph
// through this and clicks where an element is drawn.
window.flowlensMap = { cy, refresh, state };

refresh();
schedule();
