// ACLs page: add and remove post to /api/acls (the same API scripts use) and show Kafka's messages.
"use strict";
(function () {
  const result = document.getElementById("acl-result");
  const headers = {"Content-Type": "application/json", "X-Quotaflow-Page": "acls"};

  function show(r) {
    if (r.status === 401) {
      result.className = "bad";
      result.innerHTML = `Sign in first: <a href="/login?next=/acls">sign in</a> with an admin principal.`;
      return;
    }
    const err = r.body && r.body.error;
    result.className = "bad";
    result.textContent = err ? `${err.name}: ${err.message}` : `HTTP ${r.status}`;
  }

  async function post(body) {
    return qf.json("/api/acls", {method: "POST", headers, credentials: "same-origin", body: JSON.stringify(body)});
  }

  document.getElementById("acl-add-button").onclick = async () => {
    const val = id => document.getElementById(id).value.trim();
    const binding = {resource_type: val("add-resource-type"), name: val("add-name"),
      pattern_type: val("add-pattern-type"), principal: val("add-principal"), host: val("add-host") || "*",
      operation: val("add-operation"), permission_type: val("add-permission")};
    const r = await post({add: [binding]});
    if (r.ok) { result.className = "ok"; result.textContent = "Added."; setTimeout(() => location.reload(), 400); }
    else show(r);
  };
  for (const btn of document.querySelectorAll("#acl-table button.remove")) {
    btn.onclick = async () => {
      const binding = JSON.parse(btn.closest("tr").dataset.binding);
      if (!window.confirm(`Remove ${binding.permission_type} ${binding.operation} for ${binding.principal} on ` +
                          `${binding.resource_type} ${binding.pattern_type} ${binding.name}?`)) return;
      const r = await post({remove: [binding]});
      if (r.ok) location.reload(); else { document.getElementById("acl-editor").scrollIntoView(); show(r); }
    };
  }
})();
