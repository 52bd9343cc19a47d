// Progressive enhancement only: every page works without this file.
document.addEventListener("click", function (event) {
  var button = event.target.closest("[data-copy]");
  if (!button) return;
  var field = document.getElementById(button.getAttribute("data-copy"));
  if (!field) return;
  field.select();
  var done = function () { button.textContent = "Copied"; };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(field.value).then(done, function () {
      document.execCommand("copy"); done();
    });
  } else {
    document.execCommand("copy"); done();
  }
});

// The call form's "same call" panel: curl and mercato.client code follow the form as it is
// filled (the server renders the same text for the untouched form; see web/pages/callform.py).
(function () {
  var panel = document.getElementById("copy-call");
  if (!panel) return;
  var form = document.getElementById("call-form");
  var json = document.getElementById("f-body");
  var curl = document.getElementById("copy-curl");
  var python = document.getElementById("copy-python");

  function shell(text) { return "'" + text.replace(/'/g, "'\\''") + "'"; }
  function py(value) {
    if (value === null || value === undefined) return "None";
    if (value === true) return "True";
    if (value === false) return "False";
    if (typeof value === "string" || typeof value === "number") return JSON.stringify(value);
    if (Array.isArray(value)) return "[" + value.map(py).join(", ") + "]";
    return "{" + Object.keys(value).map(function (k) {
      return JSON.stringify(k) + ": " + py(value[k]);
    }).join(", ") + "}";
  }
  function fromForm() {
    var body = {};
    form.querySelectorAll("[data-name]").forEach(function (el) {
      var text = el.value;
      if (text.trim() === "") return;
      var kind = el.getAttribute("data-kind");
      var value = text;
      if (kind === "integer" || kind === "number") {
        value = Number(text);
        if (!isFinite(value)) return;
      } else if (kind !== "text") {
        try { value = JSON.parse(text); } catch (e) { return; }
      }
      body[el.getAttribute("data-name")] = value;
    });
    return body;
  }
  function show(body) {
    var base = panel.getAttribute("data-base");
    var service = panel.getAttribute("data-service");
    var version = panel.getAttribute("data-version");
    var key = panel.getAttribute("data-key");
    var endpoint = base + "/v1/services/" + service + "/versions/" + version + ":invoke";
    curl.value = [
      "curl -sS -X POST", shell(endpoint),
      '-H "Authorization: Bearer $MERCATO_API_KEY"',
      "-H", shell("Idempotency-Key: " + key),
      "-H", shell("Content-Type: application/json"),
      "-d", shell(JSON.stringify(body))
    ].join(" ");
    python.value = [
      "import os", "import uuid", "", "from mercato.client import MercatoClient", "",
      "with MercatoClient(" + JSON.stringify(base) + ', os.environ["MERCATO_API_KEY"]) as mercato:',
      "    call = mercato.invoke(",
      "        " + JSON.stringify(service) + ",",
      "        " + JSON.stringify(version) + ",",
      "        " + py(body) + ",",
      "        idempotency_key=str(uuid.uuid4()),  # new per run",
      "    )",
      "    print(call.invocation_id, call.result)"
    ].join("\n");
  }
  if (form) {
    form.addEventListener("input", function () { show(fromForm()); });
    form.addEventListener("change", function () { show(fromForm()); });
  }
  if (json) {
    json.addEventListener("input", function () {
      try {
        var body = JSON.parse(json.value);
        if (body && typeof body === "object" && !Array.isArray(body)) show(body);
      } catch (e) { /* keep the last good call */ }
    });
  }
})();
