// Presence and claims on the inbox: tell the server which card this page has
// open (over the inbox socket countersign.js keeps), renew it while it stays
// open, and patch each card's "X is reviewing" and "Open now" lines in place
// when the socket says they changed, even on a card someone is working on,
// which the list's refresh keeps as it is.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  // Renewed well inside COUNTERSIGN_PRESENCE_SECONDS (the page says it).
  const presenceSeconds = () => Number(document.body.dataset.presenceSeconds || 45);
  let open = null; // the pk of the card this page has open
  let said = "";

  function me() { return document.body.dataset.me || ""; }

  function say(force = false) {
    const socket = window.countersignInbox;
    const message = { type: "viewing", interrupts: open ? [open] : [] };
    const text = JSON.stringify(message);
    if (!socket || (!force && text === said)) return;
    if (socket.send(message)) said = text;
  }

  function cardPk(element) {
    const card = element && element.closest ? element.closest("[data-card]") : null;
    const holder = card && $("[data-attention]", card);
    return holder ? Number(holder.dataset.attention) : null;
  }

  document.addEventListener("focusin", (event) => {
    const pk = cardPk(event.target);
    if (pk !== open) { open = pk; say(); }
  });
  document.addEventListener("focusout", () => {
    // Focus moving to the page (not to another card) closes the card, once settled.
    setTimeout(() => {
      const pk = cardPk(document.activeElement);
      if (pk !== open) { open = pk; say(); }
    }, 200);
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "hidden") { open = null; say(); }
    else { open = cardPk(document.activeElement); say(); }
  });
  document.addEventListener("countersign:inbox-open", () => say(true));
  document.addEventListener("DOMContentLoaded", () => {
    setInterval(() => { if (open) say(true); }, (presenceSeconds() * 1000) / 3);
  });

  function patch(message, heard) {
    const holder = document.querySelector(`[data-attention="${Number(message.interrupt)}"]`);
    if (!holder) return;
    const claim = message.claim;
    holder.dataset.claimedBy = claim ? claim.by : "";
    // When it was heard: a read of the list asked for before it says less (countersign.js: attend).
    holder.dataset.heardAt = String(heard);
    const line = $(".claim", holder);
    if (line) {
      line.replaceChildren();
      if (claim) {
        const strong = document.createElement("strong");
        strong.textContent = claim.by === me() ? "You are reviewing" : `${claim.name} is reviewing`;
        line.append(strong);
      }
    }
    const viewers = $(".viewers", holder);
    if (viewers) {
      const others = (message.viewers || []).filter((v) => v.by !== me()).map((v) => v.name);
      viewers.textContent = others.length ? `Open now: ${others.join(", ")}` : "";
    }
  }
  document.addEventListener("countersign:inbox", (event) => {
    if (event.detail && event.detail.type === "attention") patch(event.detail, performance.now());
  });
})();
