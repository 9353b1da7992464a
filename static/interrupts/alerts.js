// Browser notifications (opt-in) of new requests while this tab is in the background.
//
// It listens to the inbox socket countersign.js already holds (the
// countersign:inbox DOM event carries each message) and opens no socket of its
// own. A "changed" message with reason "raised" says some agent raised
// something, for anyone; the "mine" message that follows it (within
// RECOUNT_SECONDS) says how many wait for this reader. A notification is shown
// only when a raise is followed by a larger "mine": a request this reader can
// decide, not one for another team. Its text is ours and a number, never agent text.
"use strict";

(() => {
  const STORE = "countersign:alerts"; // "on" once the reader asked for them; absent otherwise
  const TAG = "countersign-new-request"; // one notification at a time: a newer one replaces it
  const supported = "Notification" in window;

  const wanted = () => { try { return localStorage.getItem(STORE) === "on"; } catch (problem) { return false; } };
  function remember(on) {
    try { if (on) localStorage.setItem(STORE, "on"); else localStorage.removeItem(STORE); } catch (problem) { /* private mode */ }
  }
  const state = () => {
    if (Notification.permission === "denied") return "blocked";
    return wanted() && Notification.permission === "granted" ? "on" : "off";
  };

  // --- the control in the inbox's header ---------------------------------------
  function control(head) {
    const holder = document.createElement("span");
    holder.className = "alerts";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link";
    button.dataset.testid = "alerts-toggle";
    const said = document.createElement("span");
    said.className = "muted";
    said.dataset.testid = "alerts-state";
    said.setAttribute("role", "status");
    holder.append(button, " ", said);
    head.append(holder);

    function show() {
      const now = state();
      button.textContent = now === "on" ? "Stop notifying me" : "Notify me of new requests";
      button.setAttribute("aria-pressed", String(now === "on"));
      button.disabled = now === "blocked";
      said.textContent = {
        on: "Notifications: on (while this tab is in the background)",
        off: "Notifications: off",
        blocked: "Notifications: blocked by the browser (allow them in the site's settings)",
      }[now];
    }
    button.addEventListener("click", async () => {
      if (state() === "on") { remember(false); show(); return; }
      // Asked on this click only, never on page load: browsers ignore (and penalise) unprompted asks.
      const answer = Notification.permission === "granted" ? "granted" : await Notification.requestPermission();
      remember(answer === "granted");
      show();
    });
    show();
  }

  // --- hearing new requests -------------------------------------------------------
  let open = null;
  function notify(mine) {
    if (open) open.close();
    open = new Notification(`New request waiting: ${mine} pending`, { tag: TAG, body: "Countersign inbox" });
    open.onclick = () => { window.focus(); if (open) open.close(); };
  }

  let known = null; // what waits for this reader, as the last count said
  let raised = false; // a request was raised since that count
  document.addEventListener("countersign:inbox", (event) => {
    const message = event.detail || {};
    if (message.type === "changed") {
      if (message.reason === "raised") raised = true;
      return;
    }
    if (typeof message.mine !== "number") return;
    const grew = raised && known !== null && message.mine > known;
    if (message.type === "mine") raised = false;
    known = message.mine;
    if (grew && supported && state() === "on" && document.visibilityState === "hidden") notify(message.mine);
  });
  // Back in front: what the notification said is on the page now.
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && open) { open.close(); open = null; }
  });

  document.addEventListener("DOMContentLoaded", () => {
    const head = document.querySelector("#inbox-list:not([data-list-url])") && document.querySelector(".page-head");
    if (supported && head) control(head);
  });
})();
