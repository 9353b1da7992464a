// A decision taken on this page, said once more at the foot of the screen: what was decided, with Undo,
// for as long as its line in the batch offers one. The line stays where the card was; the toast is the
// receipt a reader sees wherever the page has scrolled. Its Undo presses the line's own.
"use strict";

(() => {
  const { $ } = window.countersign;
  const DECIDE = /\/interrupts\/(\d+)\/decide\/$/;
  let shown = null; // { pk, toast }

  const undoOf = (pk) => {
    const line = document.getElementById(`decided-${pk}`);
    return line && line.classList.contains("mine") ? $("button.undo", line) : null;
  };

  function close() {
    if (!shown) return;
    shown.toast.remove();
    shown = null;
  }

  function say(pk) {
    const line = document.getElementById(`decided-${pk}`);
    if (!line || !undoOf(pk)) return;
    close();
    const toast = document.createElement("div");
    toast.className = "toast";
    toast.setAttribute("role", "status");
    toast.dataset.testid = "toast";
    const words = document.createElement("p");
    const outcome = document.createElement("strong");
    outcome.className = `outcome ${Array.from(line.classList).find((name) => name.startsWith("outcome-")) || ""}`;
    outcome.textContent = ($(".outcome", line) || line).textContent.trim();
    const what = $(".what", line);
    const request = what && what.firstChild ? what.firstChild.textContent.trim() : "";
    words.append(outcome, request ? `: ${request}` : "");
    const undo = document.createElement("button");
    undo.type = "button";
    undo.className = "undo";
    undo.dataset.testid = "toast-undo";
    undo.textContent = "Undo";
    undo.addEventListener("click", () => {
      const press = undoOf(pk);
      close();
      if (press) press.click();
    });
    const dismiss = document.createElement("button");
    dismiss.type = "button";
    dismiss.className = "link";
    dismiss.textContent = "Close";
    dismiss.setAttribute("aria-label", "Close this receipt");
    dismiss.addEventListener("click", close);
    toast.append(words, undo, dismiss);
    document.body.append(toast);
    shown = { pk, toast };
  }

  // Gone with the Undo it offers: the hold ended and the answer was sent, or it was undone from the line.
  function check() {
    if (shown && !undoOf(shown.pk)) close();
  }

  document.addEventListener("DOMContentLoaded", () => {
    let deciding = null;
    document.body.addEventListener("htmx:beforeRequest", (event) => {
      const asked = DECIDE.exec(new URL(event.detail.requestConfig.path, location.href).pathname);
      deciding = asked ? asked[1] : null;
    });
    document.body.addEventListener("htmx:afterSwap", () => {
      const pk = deciding;
      deciding = null;
      if (pk && !document.getElementById(`interrupt-${pk}`)) say(pk);
      else check();
    });
    document.addEventListener("countersign:refreshed", check);
    // A bulk receipt takes the foot of the screen.
    document.addEventListener("countersign:bulk", close);
    setInterval(check, 1000);
  });
})();
