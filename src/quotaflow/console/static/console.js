// Shared helpers of the console's pages (no build step: plain browser JavaScript).
"use strict";
const qf = {
  esc(s) { return String(s).replace(/[&<>"']/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c])); },
  num(v) {
    if (v === null || v === undefined) return "unlimited";
    if (!isFinite(v)) return String(v);
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + " G";
    if (a >= 1e6) return (v / 1e6).toFixed(2) + " M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + " k";
    return a >= 100 ? v.toFixed(0) : v.toPrecision(3).replace(/\.?0+$/, "");
  },
  entityText(e) {
    const order = ["user", "client-id", "ip", "client-id-prefix"];
    return Object.keys(e).sort((a, b) => order.indexOf(a) - order.indexOf(b))
      .map(t => `${t}=${e[t] === null ? "<default>" : e[t]}`).join(", ");
  },
  // the Quotas page filtered (strict) to exactly this entity, as the server's quotas_link
  quotasLink(e) {
    const q = new URLSearchParams({strict: "1"});
    for (const t of Object.keys(e)) {
      if (e[t] === null) q.set(`${t}_match`, "default"); else { q.set(`${t}_match`, "exact"); q.set(t, e[t]); }
    }
    return `/quotas?${q}`;
  },
  async json(url, opts) {
    const r = await fetch(url, opts);
    let body = null;
    try { body = await r.json(); } catch (e) { body = null; }
    return {status: r.status, ok: r.ok, body};
  },
  // A uPlot line chart: x = unix seconds, series = [{label, values, color, dash, points}]
  chart(el, title, x, series, opts = {}) {
    el.innerHTML = "";
    const width = opts.width || Math.max(300, Math.min(el.clientWidth || 560, 900));
    const cfg = {
      title, width, height: opts.height || 220,
      scales: {x: {time: opts.time !== false}},
      axes: [{}, {size: 70, values: (u, vals) => vals.map(qf.num)}],
      series: [{}].concat(series.map(s => ({
        label: s.label, stroke: s.color, width: s.width || 1.5, dash: s.dash, spanGaps: false,
        points: s.points ? {show: true, size: 6, stroke: s.color, fill: s.color, width: 0} : {show: false},
        paths: s.points ? () => null : undefined,
        value: (u, v) => v === null || v === undefined ? "—" : qf.num(v),
      }))),
    };
    return new uPlot(cfg, [x].concat(series.map(s => s.values)), el);
  },
};
