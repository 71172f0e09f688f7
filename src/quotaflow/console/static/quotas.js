// Quotas page: the editor posts to /api/quotas (the same API scripts use) and shows Kafka's messages at the field.
"use strict";
(function () {
  const form = document.getElementById("alter-form");
  const opsBody = document.querySelector("#ops tbody");
  const result = document.getElementById("alter-result");
  const entityError = document.getElementById("entity-error");

  function addOp(key = "", value = "") {
    const tr = document.createElement("tr");
    tr.className = "op";
    tr.innerHTML = `<td><input class="op-key" list="quota-keys" placeholder="key" size="26"></td>
      <td><input class="op-value" placeholder="remove" size="16"></td>
      <td><button type="button" class="op-del" title="drop this row">✕</button></td>
      <td class="field-error op-error"></td>`;
    tr.querySelector(".op-key").value = key;
    tr.querySelector(".op-value").value = value;
    tr.querySelector(".op-del").onclick = () => { tr.remove(); if (!opsBody.children.length) addOp(); };
    opsBody.appendChild(tr);
    return tr;
  }

  function setEntity(entity) {
    for (const sel of form.querySelectorAll("select[name=kind]")) {
      const t = sel.dataset.type, input = form.querySelector(`input[name=name][data-type="${t}"]`);
      if (entity && t in entity) { sel.value = entity[t] === null ? "default" : "name"; input.value = entity[t] || ""; }
      else { sel.value = ""; input.value = ""; }
    }
  }

  function readEntity() {
    const entity = {};
    for (const sel of form.querySelectorAll("select[name=kind]")) {
      const t = sel.dataset.type, input = form.querySelector(`input[name=name][data-type="${t}"]`);
      if (sel.value === "default") entity[t] = null;
      else if (sel.value === "name" || input.value !== "") entity[t] = input.value;
    }
    return entity;
  }

  function readOps() {
    return [...opsBody.querySelectorAll("tr.op")].filter(tr => tr.querySelector(".op-key").value !== "" ||
        tr.querySelector(".op-value").value !== "")
      .map(tr => {
        const raw = tr.querySelector(".op-value").value.trim();
        const n = Number(raw);
        // a number JSON can carry goes as one; anything else (1e999, NaN, text) as typed, for the server to judge
        return {key: tr.querySelector(".op-key").value, value: raw === "" ? null : (isFinite(n) ? n : raw)};
      });
  }

  function clearErrors() {
    result.textContent = ""; result.className = ""; entityError.textContent = "";
    form.querySelectorAll(".invalid").forEach(el => el.classList.remove("invalid"));
    form.querySelectorAll(".op-error").forEach(el => { el.textContent = ""; });
  }

  function showError(err, field, ops) {
    const msg = `${err.name}: ${err.message}`;
    if (field && field.op !== undefined) {
      const rows = [...opsBody.querySelectorAll("tr.op")].filter(tr => tr.querySelector(".op-key").value !== "" ||
        tr.querySelector(".op-value").value !== "");
      const tr = rows[field.op];
      if (tr) {
        tr.querySelector(field.part === "key" ? ".op-key" : ".op-value").classList.add("invalid");
        tr.querySelector(".op-error").textContent = msg;
        result.className = "bad"; result.textContent = "Nothing was written.";
        return;
      }
    }
    if (field && field.entity) {
      document.getElementById("entity-fieldset").classList.add("invalid");
      entityError.textContent = msg;
      result.className = "bad"; result.textContent = "Nothing was written.";
      return;
    }
    result.className = "bad"; result.textContent = msg;
  }

  async function submit(validateOnly) {
    clearErrors();
    const body = {entity: readEntity(), ops: readOps(), validate_only: validateOnly};
    const r = await qf.json("/api/quotas", {method: "POST", headers: {"Content-Type": "application/json", "X-Quotaflow-Page": "quotas"},
      body: JSON.stringify(body), credentials: "same-origin"});
    if (r.ok) {
      result.className = "ok";
      result.textContent = validateOnly
        ? `Valid: ${qf.entityText(body.entity)} would be changed (nothing written).`
        : `Altered ${qf.entityText(body.entity)} (store change ${r.body.seq}).`;
      if (!validateOnly) setTimeout(() => window.location.reload(), 600);
      return;
    }
    if (r.status === 401) {
      result.className = "bad";
      result.innerHTML = `Sign in first: <a href="/login?next=/quotas">sign in</a> with an admin principal.`;
      return;
    }
    if (r.body && r.body.error) showError(r.body.error, r.body.field, body.ops);
    else { result.className = "bad"; result.textContent = `HTTP ${r.status}`; }
  }

  document.getElementById("add-op").onclick = () => addOp();
  document.getElementById("validate").onclick = () => submit(true);
  document.getElementById("apply").onclick = () => submit(false);
  for (const btn of document.querySelectorAll("#quota-table button.edit")) {
    btn.onclick = () => {
      const tr = btn.closest("tr");
      setEntity(JSON.parse(tr.dataset.entity));
      opsBody.innerHTML = "";
      const values = JSON.parse(tr.dataset.values);
      for (const k of Object.keys(values)) addOp(k, String(values[k]));
      addOp();
      clearErrors();
      document.getElementById("editor").scrollIntoView({behavior: "smooth"});
    };
  }
  for (const btn of document.querySelectorAll("#quota-table button.delete")) {
    btn.onclick = async () => {
      const tr = btn.closest("tr"), entity = JSON.parse(tr.dataset.entity);
      if (!window.confirm(`Remove every quota of ${qf.entityText(entity)}?`)) return;
      clearErrors();
      const ops = Object.keys(JSON.parse(tr.dataset.values)).map(key => ({key, value: null}));
      const r = await qf.json("/api/quotas", {method: "POST", credentials: "same-origin",
        headers: {"Content-Type": "application/json", "X-Quotaflow-Page": "quotas"},
        body: JSON.stringify({entity, ops, validate_only: false})});
      if (r.ok) { window.location.reload(); return; }
      document.getElementById("editor").scrollIntoView();
      if (r.status === 401) {
        result.className = "bad";
        result.innerHTML = `Sign in first: <a href="/login?next=/quotas">sign in</a> with an admin principal.`;
      } else showError(r.body?.error || {name: "HTTP", message: String(r.status)}, null, ops);
    };
  }
  // Pre-fill from the filter: describing user=alice then "Add" edits alice.
  const params = new URLSearchParams(location.search), pre = {};
  for (const t of ["user", "client-id", "ip", "client-id-prefix"]) {
    const m = params.get(`${t}_match`);
    if (m === "exact" && params.get(t)) pre[t] = params.get(t); else if (m === "default") pre[t] = null;
  }
  setEntity(pre);
  addOp();
})();
