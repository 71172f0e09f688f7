// Backtest page of a `quotaflow recommend` output: apply the proposal, or the entities ticked, via /api/proposals.
"use strict";
(function () {
  const table = document.getElementById("proposal-rows");
  const result = document.getElementById("proposal-result");
  if (!table || !result) return;
  const picks = () => [...table.querySelectorAll("input.proposal-pick")];
  const all = document.getElementById("proposal-all");
  if (all) all.onchange = () => picks().forEach(p => { p.checked = all.checked; });

  async function submit(validateOnly) {
    const entries = picks().filter(p => p.checked).map(p => Number(p.value));
    result.className = ""; result.textContent = "";
    if (!entries.length) { result.className = "bad"; result.textContent = "Tick at least one entity."; return; }
    const body = {entries, validate_only: validateOnly};
    if (!validateOnly && table.dataset.other) {  // computed from another store: written here only when confirmed
      if (!window.confirm(`This proposal was computed from another store. Write it to ${table.dataset.store}?`)) {
        result.className = "bad"; result.textContent = "Not applied: the proposal is from another store."; return;
      }
      body.confirm_store = table.dataset.store;
    }
    const r = await qf.json(`/api/proposals/${encodeURI(table.dataset.id)}`, {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Quotaflow-Page": "backtest"},
      body: JSON.stringify(body)});
    if (r.status === 401) {
      result.className = "bad";
      result.innerHTML = `Sign in first: <a href="/login?next=${encodeURIComponent(location.pathname)}">sign in</a> with an admin principal.`;
      return;
    }
    if (!r.ok) { result.className = "bad"; result.textContent = r.body?.error ? `${r.body.error.name}: ${r.body.error.message}` : `HTTP ${r.status}`; return; }
    const failed = r.body.results.filter(x => x.error);
    const changed = r.body.results.filter(x => !x.error)
      .reduce((n, x) => n + Object.values(x.changes).filter(c => c.old !== c.new).length, 0);
    result.className = failed.length ? "bad" : "ok";
    result.innerHTML = qf.esc(`${validateOnly ? "Valid (nothing written)" : "Applied"}: ${r.body.results.length - failed.length} entities, ${changed} values changed`
      + (validateOnly ? "" : ` (store change ${r.body.seq})`) + `; ${failed.length} failed.`)
      + failed.map(x => `<br>${qf.esc(qf.entityText(x.entity))}: ${qf.esc(x.error.name)}: ${qf.esc(x.error.message)}`).join("");
    if (!validateOnly && !failed.length) setTimeout(() => window.location.reload(), 800);
  }
  const v = document.getElementById("proposal-validate"), a = document.getElementById("proposal-apply");
  if (v) v.onclick = () => submit(true);
  if (a) a.onclick = () => submit(false);
})();
