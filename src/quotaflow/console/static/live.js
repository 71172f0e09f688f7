// Live page: polls /api/live (the console scrapes the gateways' /metrics) and redraws charts and tables.
"use strict";
(function () {
  const charts = new Map();   // entity id -> {plot, el}
  let connPlot = null, connKey = "";
  const interval = Math.max(1, parseFloat(document.getElementById("live-status")?.textContent.match(/[\d.]+/)?.[0] || "2"));

  function chartFor(row, top = true) {
    const h = row.history;
    const data = [h.t, h.rate, h.quota.map(q => q === null ? null : q), h.throttle_ms];
    const existing = top && charts.get(row.id);
    if (existing) { existing.plot.setData(data); existing.title.innerHTML = titleOf(row); return existing.box; }
    const box = document.createElement("div");
    box.className = "chart-box";
    box.dataset.id = row.id;
    const title = document.createElement("div");
    title.className = "title";
    title.innerHTML = titleOf(row);
    const el = document.createElement("div");
    box.append(title, el);
    const plot = new uPlot({
      width: 560, height: 200,
      scales: {x: {time: true}, ms: {auto: true}},
      axes: [{}, {size: 70, values: (u, v) => v.map(qf.num), label: row.unit}, {side: 1, scale: "ms", size: 60, label: "throttle ms", grid: {show: false}, values: (u, v) => v.map(qf.num)}],
      series: [{}, {label: "rate", stroke: "#0b5cad", width: 1.5, value: (u, v) => v == null ? "—" : qf.num(v)},
               {label: "quota", stroke: "#c62828", dash: [6, 4], width: 1.5, value: (u, v, s, i) => i == null ? "—" : v == null ? "unlimited" : qf.num(v)},
               {label: "throttle ms", stroke: "#f0b429", scale: "ms", width: 1, value: (u, v) => v == null ? "—" : qf.num(v)}],
    }, data, el);
    if (!top) return {plot, box};
    charts.set(row.id, {plot, box, title});
    return box;
  }

  // the quota-id picked in the table, charted from /api/live/history (its whole kept history)
  let picked = null, pickedRow = null, pickedPlot = null;
  async function showPicked() {
    const r = await qf.json(`/api/live/history?id=${encodeURIComponent(picked)}`);
    const box = document.getElementById("picked-chart");
    if (!r.ok || !pickedRow) { box.textContent = r.body?.error?.message || ""; return; }
    const h = r.body, data = [h.t, h.rate, h.quota, h.throttle_ms];
    if (pickedPlot && box.dataset.id === picked) { pickedPlot.setData(data); return; }
    if (pickedPlot) pickedPlot.destroy();
    box.innerHTML = "";
    box.dataset.id = picked;
    const holder = chartFor({...pickedRow, history: h}, false);
    box.appendChild(holder.box);
    pickedPlot = holder.plot;
  }

  function titleOf(r) {
    const who = [r.user_name ? `user=${qf.esc(r.user_name)}` : "", r.client_id ? `client-id=${qf.esc(r.client_id)}` : ""].filter(Boolean).join(" ");
    const link = resolveLink(r);
    return `<b>${qf.esc(r.quota_type)}</b> ${who || "(no tags)"} <span class="muted">@${qf.esc(r.gateway)}</span>` +
      (r.throttled ? ` <span class="badge">throttled ${qf.num(r.throttle_time_ms)} ms</span>` : "") +
      (link ? ` <a href="${link}">resolve</a>` : "");
  }

  function resolveLink(r) {
    if (!r.user_name || !r.client_id) return null;
    return `/resolve?user=${encodeURIComponent(r.user_name)}&client-id=${encodeURIComponent(r.client_id)}`;
  }

  function render(doc) {
    const gwBody = document.querySelector("#gateway-table tbody");
    gwBody.innerHTML = doc.gateways.map(g => `<tr><td>${qf.esc(g.url)}</td><td><span class="dot ${g.ok ? "ok" : "bad"}"></span>${g.ok ? "ok" : qf.esc(g.error || "not scraped yet")}</td>
      <td class="num">${g.series}${g.dropped_series ? ` (+${g.dropped_series} dropped)` : ""}</td>
      <td>${g.last_scrape ? new Date(g.last_scrape * 1000).toLocaleTimeString() : "—"}</td></tr>`).join("");

    const top = document.getElementById("top-charts");
    const wanted = new Set(doc.top.map(r => r.id));
    for (const [id, c] of charts) if (!wanted.has(id)) { c.plot.destroy(); c.box.remove(); charts.delete(id); }
    doc.top.forEach(r => top.appendChild(chartFor(r)));
    document.getElementById("no-entities").hidden = doc.entities.length > 0;

    document.querySelector("#entity-table tbody").innerHTML = doc.entities.map(r => {
      const link = resolveLink(r);
      return `<tr class="clickable ${r.throttled ? "throttled" : ""} ${r.id === picked ? "selected" : ""}" data-id="${qf.esc(r.id)}"><td>${qf.esc(r.gateway)}</td><td>${qf.esc(r.quota_type)}</td>
      <td>${qf.esc(r.user_name || "—")}</td><td>${qf.esc(r.client_id || "—")}</td>
      <td class="num">${qf.num(r.rate)}</td><td class="num">${r.quota_entity ? `<a href="${qf.quotasLink(r.quota_entity)}" title="${qf.esc(qf.entityText(r.quota_entity))}">${qf.num(r.quota)}</a>` : qf.num(r.quota)}</td>
      <td class="num">${r.usage === null ? "—" : (100 * r.usage).toFixed(0) + " %"}</td>
      <td class="num">${qf.num(r.throttle_time_ms)}</td><td>${link ? `<a href="${link}">resolve</a>` : ""}</td></tr>`;
    }).join("");

    document.querySelectorAll("#entity-table tr.clickable").forEach(tr => tr.addEventListener("click", ev => {
      if (ev.target.closest("a")) return;
      picked = tr.dataset.id;
      pickedRow = doc.entities.find(r => r.id === picked);
      showPicked();
    }));
    pickedRow = doc.entities.find(r => r.id === picked) || pickedRow;
    if (picked) showPicked();

    document.querySelector("#conn-table tbody").innerHTML = doc.connections.map(c =>
      `<tr><td>${qf.esc(c.gateway)}</td><td>${qf.esc(c.metric)}</td><td>${qf.esc(c.labels || "—")}</td><td class="num">${qf.num(c.value)}</td></tr>`).join("");
    const rates = doc.connections.filter(c => /accept_rate|throttle_time/.test(c.metric) && c.t.length);
    const key = rates.map(c => c.gateway + c.metric + c.labels).join(";");
    const el = document.getElementById("conn-chart");
    if (!rates.length) { el.innerHTML = '<p class="muted">No connection metrics yet.</p>'; return; }
    const x = rates[0].t;
    const data = [x].concat(rates.map(c => x.map((_, i) => c.values[c.values.length - x.length + i] ?? null)));
    const palette = ["#0b5cad", "#2e7d32", "#c62828", "#6a1b9a", "#ef6c00", "#00838f", "#5d4037", "#455a64"];
    if (connPlot && key === connKey) { connPlot.setData(data); return; }
    if (connPlot) connPlot.destroy();
    el.innerHTML = "";
    connKey = key;
    connPlot = new uPlot({
      width: Math.min(1180, el.clientWidth || 1100), height: 220, scales: {x: {time: true}},
      axes: [{}, {size: 70, values: (u, v) => v.map(qf.num)}],
      series: [{}].concat(rates.map((c, i) => ({label: `${c.metric} ${c.labels}`.trim(), stroke: palette[i % palette.length], width: 1.5}))),
    }, data, el);
  }

  async function tick() {
    try {
      const r = await qf.json("/api/live");
      if (r.ok) { render(r.body); document.getElementById("live-status").textContent = `refreshes every ${r.body.interval_s} s · updated ${new Date().toLocaleTimeString()}`; }
    } finally {
      setTimeout(tick, interval * 1000);
    }
  }
  if (document.getElementById("gateway-table")) tick();
})();
