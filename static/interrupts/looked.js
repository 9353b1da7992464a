// What a reviewer had in view when deciding (interrupts/rules/looked.py): which of a card's parts
// beyond its summary they opened, how long the card was on screen, and the digest of what it showed,
// sent with the decision in the card's hidden "looked" field.
(() => {
  "use strict";
  // By the card's id, not its element: a live read of the list swaps the element, not what was looked at.
  const cards = new Map(); // card id -> {since: ms or null, seconds, opened: Set}
  const state = (card) => {
    if (!cards.has(card.id)) cards.set(card.id, { since: null, seconds: 0, opened: new Set() });
    return cards.get(card.id);
  };
  const onScreen = new IntersectionObserver((entries) => {
    const now = performance.now();
    for (const entry of entries) {
      const s = state(entry.target);
      if (entry.isIntersecting && s.since === null) s.since = now;
      if (!entry.isIntersecting && s.since !== null) { s.seconds += (now - s.since) / 1000; s.since = null; }
    }
  }, { threshold: 0.4 });
  const watch = (root) => {
    for (const card of root.querySelectorAll("[data-card]")) {
      if (card.dataset.lookedWatched) continue;
      card.dataset.lookedWatched = "yes";
      onScreen.observe(card);
      gate(card);
    }
  };
  // A policy that wants long args read first (data-look-first): the approving buttons wait until they are opened.
  const APPROVING = "button[name=action][value=approve], button[name=action][value=respond], " +
    "button[name=action][value=grant]";
  const gate = (card) => {
    if (!card.querySelector("form[data-look-first]")) return;
    const unread = !state(card).opened.has("args");
    card.dataset.lookFirst = unread ? "waiting" : "read";
    const editing = card.dataset.editsPending === "yes"; // forms.js holds the plain Approve while edits wait
    for (const button of card.querySelectorAll(APPROVING)) {
      button.disabled = unread || (editing && button.value === "approve");
    }
  };
  // A part opened once counts, even if closed again before deciding. "toggle" does not bubble: captured.
  document.addEventListener("toggle", (event) => {
    const part = event.target instanceof Element && event.target.dataset.lookedPart;
    const card = part && event.target.open && event.target.closest("[data-card]");
    if (!card) return;
    state(card).opened.add(part);
    gate(card);
  }, true);
  // Filled as the form goes (captured before htmx's own listener reads the form). An approval the policy
  // wants preceded by reading goes nowhere until the args were opened (the server refuses it too).
  document.addEventListener("submit", (event) => {
    const field = event.target instanceof HTMLFormElement && event.target.querySelector("input[data-looked]");
    const card = field && field.closest("[data-card]");
    if (!card) return;
    if (card.dataset.lookFirst === "waiting" && event.submitter && event.submitter.matches(APPROVING)) {
      event.preventDefault();
      event.stopImmediatePropagation();
      card.querySelector("[data-testid=look-first]")?.focus?.();
      return;
    }
    const s = state(card);
    const open = s.since === null ? 0 : (performance.now() - s.since) / 1000;
    field.value = JSON.stringify({
      opened: [...s.opened], seconds: Math.min(86400, Math.round((s.seconds + open) * 10) / 10),
      shown: field.dataset.shown,
    });
  }, true);
  const start = () => {
    watch(document);
    let queued = false; // cards added by any script: looked for once a frame, not on every change
    new MutationObserver(() => {
      if (queued) return;
      queued = true;
      requestAnimationFrame(() => { queued = false; watch(document); });
    }).observe(document.body, { childList: true, subtree: true });
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
