// Live page, shadow section: polls /api/shadow (the running shadow set from the store, live vs shadow throttling
// from the gateways' /metrics); an admin promotes (after confirming when it takes effect), stops or rolls back.
"use strict";
(function () {
  const root = document.getElementById("shadow");
  if (!root) return;
  const mayAct = root.dataset.mayAct === "1";
  const result = document.getElementById("shadow-result");
  const interval = Math.max(1, parseFloat(document.getElementById("live-status")?.textContent.match(/[\d.]+/)?.[0] || "2"));
  const charts = new Map();  // row id -> {plot, box}
  let current = null;  // the running set the page shows (its id is sent with promote / stop)
  const utc = ms => new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  const val = v => v === null || v === undefined ? "absent" : qf.num(v);

  function say(ok, text) { result.className = ok ? "ok" : "bad"; result.textContent = text; }

  function chartFor(r) {
    const h = r.history, data = [h.t, h.live_throttle_ms, h.shadow_throttle_ms];
    const got = charts.get(r.id);
    if (got) { got.plot.setData(data); return got.box; }
    const box = document.createElement("div");
    box.className = "chart-box";
    const title = document.createElement("div");
    title.className = "title";
    const who = [r.user_name ? `user=${r.user_name}` : "", r.client_id ? `client-id=${r.client_id}` : ""].filter(Boolean).join(" ");
    title.textContent = `${r.quota_type} ${who || "(no tags)"} @${r.gateway}`;
    const el = document.createElement("div");
    box.append(title, el);
    const plot = new uPlot({
      width: 560, height: 180, scales: {x: {time: true}},
      axes: [{}, {size: 60, label: "throttle ms", values: (u, v) => v.map(qf.num)}],
      series: [{}, {label: "live", stroke: "#0b5cad", width: 1.5, value: (u, v) => v == null ? "—" : qf.num(v)},
               {label: "shadow", stroke: "#c62828", dash: [6, 4], width: 1.5, value: (u, v) => v == null ? "—" : qf.num(v)}],
    }, data, el);
    charts.set(r.id, {plot, box});
    return box;
  }

  function render(doc) {
    const s = doc.shadow;
    current = s;
    document.getElementById("shadow-none").hidden = !!s;
    document.getElementById("shadow-running").hidden = !s;
    const last = doc.last_promotion;
    document.getElementById("shadow-last").textContent = last
      ? `Last ${last.kind}: shadow set "${last.shadow_name}" (id ${last.shadow_id}) by ${last.by} at ${utc(last.at_ms)}, effective ${utc(last.effective_ms)}.`
      : "No promotion yet.";
    if (!s) { for (const c of charts.values()) { c.plot.destroy(); c.box.remove(); } charts.clear(); return; }
    document.getElementById("shadow-head").innerHTML =
      `<b id="shadow-name">${qf.esc(s.name)}</b> <span class="muted">(id ${s.id})</span> started by <b id="shadow-by">${qf.esc(s.started_by)}</b> at ${qf.esc(utc(s.started_ms))}`;
    document.querySelector("#shadow-changes tbody").innerHTML = doc.changes.map(c =>
      `<tr><td class="entity"><a href="${qf.quotasLink(c.entity)}">${qf.esc(qf.entityText(c.entity))}</a></td><td>${qf.esc(c.key)}</td>
       <td class="num">${val(c.enforced)}</td><td class="num changed">${val(c.shadow)}</td></tr>`).join("");
    const rows = doc.entities;
    document.getElementById("shadow-no-metrics").hidden = rows.length > 0;
    document.querySelector("#shadow-entities tbody").innerHTML = rows.map(r =>
      `<tr class="${r.shadow_throttle_ms !== r.live_throttle_ms ? "throttled" : ""}"><td>${qf.esc(r.gateway)}</td><td>${qf.esc(r.quota_type)}</td>
       <td>${qf.esc(r.user_name || "—")}</td><td>${qf.esc(r.client_id || "—")}</td>
       <td class="num">${qf.num(r.live_throttle_ms)}</td><td class="num">${qf.num(r.shadow_throttle_ms)}</td>
       <td class="num">${qf.num(r.shadow_throttled_requests)}</td></tr>`).join("");
    const top = rows.slice(0, 6), wanted = new Set(top.map(r => r.id)), holder = document.getElementById("shadow-charts");
    for (const [id, c] of charts) if (!wanted.has(id)) { c.plot.destroy(); c.box.remove(); charts.delete(id); }
    top.forEach(r => holder.appendChild(chartFor(r)));
  }

  async function post(action, body) {
    const r = await qf.json(`/api/shadow/${action}`, {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Quotaflow-Page": "live"}, body: JSON.stringify(body)});
    if (!r.ok) { say(false, r.body?.error ? `${r.body.error.name}: ${r.body.error.message}` : `HTTP ${r.status}`); return null; }
    return r.body;
  }

  const grace = () => parseFloat(document.getElementById("shadow-in").value);
  function showEffective() {
    const g = grace();
    document.getElementById("shadow-effective").textContent = isFinite(g) && g >= 0
      ? `every gateway switches at about ${utc(Date.now() + g * 1000)}` : "";
  }

  if (mayAct) {
    const confirmBox = document.getElementById("shadow-confirm");
    document.getElementById("shadow-promote").onclick = () => { confirmBox.hidden = false; showEffective(); };
    document.getElementById("shadow-in").oninput = showEffective;
    document.getElementById("shadow-confirm-no").onclick = () => { confirmBox.hidden = true; };
    document.getElementById("shadow-confirm-yes").onclick = async () => {
      if (!current) return;
      const done = await post("promote", {shadow_id: current.id, in_s: grace()});
      confirmBox.hidden = true;
      if (done) say(true, `Promoted "${done.promotion.shadow_name}" by ${done.promotion.by}: takes effect at ${utc(done.promotion.effective_ms)} (store change ${done.seq}).`);
      refresh();
    };
    document.getElementById("shadow-stop").onclick = async () => {
      if (!current) return;
      const done = await post("stop", {shadow_id: current.id});
      if (done) say(true, `Stopped "${done.shadow.name}" by ${done.shadow.ended_by}: nothing was enforced.`);
      refresh();
    };
    document.getElementById("shadow-rollback").onclick = async () => {
      const done = await post("rollback", {in_s: parseFloat(root.dataset.grace)});
      if (done) say(true, `Rolled back "${done.promotion.shadow_name}" by ${done.promotion.by}: takes effect at ${utc(done.promotion.effective_ms)}.`);
      refresh();
    };
  }

  async function refresh() {
    const r = await qf.json("/api/shadow");
    if (r.ok) render(r.body); else say(false, r.body?.error ? `${r.body.error.name}: ${r.body.error.message}` : `HTTP ${r.status}`);
  }
  async function tick() { try { await refresh(); } finally { setTimeout(tick, interval * 1000); } }
  tick();
})();
