// Backtest page: click an entity row to chart its windows (rate, quota, throttled windows) from /api/backtest-windows.
"use strict";
(function () {
  const el = document.getElementById("window-chart");
  if (!el) return;
  let plot = null;
  async function show(tr) {
    document.querySelectorAll("#bt-entities tr.selected").forEach(r => r.classList.remove("selected"));
    tr.classList.add("selected");
    const q = new URLSearchParams({id: el.dataset.id, broker: tr.dataset.broker, quota_type: tr.dataset.type,
                                   user: tr.dataset.user, client_id: tr.dataset.client});
    const r = await qf.json(`/api/backtest-windows?${q}`);
    if (!r.ok) { el.textContent = r.body?.error?.message || `HTTP ${r.status}`; return; }
    const w = r.body;
    const throttledAt = w.rate.map((v, i) => w.throttled[i] > 0 ? v : null);
    if (plot) plot.destroy();
    const who = `${tr.dataset.type} user=${tr.dataset.user || "—"} client-id=${tr.dataset.client || "—"} @${tr.dataset.broker}`;
    plot = qf.chart(el, who, w.t, [
      {label: "rate", values: w.rate, color: "#0b5cad"},
      {label: "quota", values: w.limit, color: "#c62828", dash: [6, 4]},
      {label: "throttled window", values: throttledAt, color: "#c62828", points: true},
    ], {width: Math.min(1180, el.clientWidth || 1100), height: 260});
  }
  const rows = document.querySelectorAll("#bt-entities tr.clickable");
  rows.forEach(tr => tr.addEventListener("click", () => show(tr)));
  if (rows.length) show(rows[0]);
})();
