// Passkeys (interrupts/hub/passkeys.py): adding one on the Passkeys page, and, on a card whose policy asks
// for one, signing the exact approval before the form goes (the server checks the signature again).
(() => {
  "use strict";
  const say = (root, text) => {
    const box = root.querySelector("[data-passkey-error]");
    if (box) { box.textContent = text; box.hidden = !text; }
  };
  const post = async (url, body) => {
    const response = await fetch(url, { method: "POST", body, credentials: "same-origin",
                                        headers: { Accept: "application/json" } });
    const text = await response.text();
    if (!response.ok) {
      let detail = "The server refused it.";
      try { detail = JSON.parse(text).detail || detail; } catch (notJson) { /* a page: keep the sentence */ }
      throw new Error(detail);
    }
    return JSON.parse(text);
  };
  const failed = (problem) => (problem && problem.name === "NotAllowedError"
    ? "The passkey was not used (cancelled, or timed out): nothing was sent."
    : (problem && problem.message) || "The passkey could not be used.");

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if (form.dataset.passkeyRegister !== undefined) {
      const field = form.querySelector("input[name=credential]");
      if (field.value) return; // made: the page keeps it
      event.preventDefault();
      try {
        const options = await post(form.dataset.passkeyRegister, new FormData(form));
        const made = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) });
        field.value = JSON.stringify(made.toJSON());
        form.querySelector("input[name=password]").value = ""; // checked already: it need not travel again
        form.submit();
      } catch (problem) { say(form, failed(problem)); }
      return;
    }
    const field = form.dataset.passkey && form.querySelector("input[data-passkey-field]");
    const submitter = event.submitter;
    // The action is the pressed button's, or the form's own (Edit & approve's final form says "edit").
    const action = submitter && submitter.name === "action" ? submitter.value
      : form.querySelector("input[type=hidden][name=action]")?.value;
    if (!field || field.value || !["approve", "respond", "edit"].includes(action)) return;
    // Before htmx sends it: sign this answer first, then send the form again with the signature.
    event.preventDefault();
    event.stopImmediatePropagation();
    const card = form.closest("[data-card]") || form;
    say(card, "");
    try {
      const body = new FormData(form);
      body.set("action", action);
      const options = await post(form.dataset.passkey, body);
      const signed = await navigator.credentials.get({
        publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options) });
      field.value = JSON.stringify(signed.toJSON());
      form.requestSubmit(submitter || undefined);
    } catch (problem) { say(card, failed(problem)); }
  }, true);
})();
