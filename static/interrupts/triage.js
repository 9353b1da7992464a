// The inbox's triage list (_triage.html): a row per request beside the cards. The row of the card the
// reader is on is marked current; a row opens its card (click or Enter); rows that arrived since the
// reader last looked are marked new, counted at the top of the list. One at a time (the default, kept in
// a cookie): beside the list, only the open request shows, its card or the line of its decision.
// Narrower than both fit, the list is a screen of its own: "All requests" opens it, a row its request.
"use strict";

(() => {
  // Loaded before countersign.js (the page's head block), so its own $ and $$.
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const seen = new Set();
  let current = null;
  // The view is a cookie: the server renders the other cards folded when one shows at a time (inbox.cards).
  const cookie = () => ($("#inbox-list") || { dataset: {} }).dataset.viewCookie || "countersign_inbox_view";
  function chosen() {
    const found = document.cookie.split("; ").find((pair) => pair.startsWith(`${cookie()}=`));
    return found ? found.slice(cookie().length + 1) : "one";
  }
  function choose(view) {
    const secure = location.protocol === "https:" ? "; secure" : "";
    document.cookie = `${cookie()}=${view}; path=/; max-age=31536000; samesite=lax${secure}`;
  }
  const single = () => chosen() !== "all";
  const STORED_VIEW = "countersign:inbox-view"; // where the choice was kept before it was a cookie

  // The open request: its card, or once decided the line that says so (the view moves on only with j).
  function show(id) {
    // An attribute, not a class: htmx's settle puts back a swapped element's classes 20 ms after a swap.
    for (const open of $$(".stack [data-open]")) open.removeAttribute("data-open");
    const shown = (id && (document.getElementById(id) || document.getElementById(id.replace("interrupt-", "decided-"))))
      || $(".stack [data-card]:not(.expired)");
    if (shown && single()) shown.dataset.open = "";  // every card stacked: none is singled out
    // A folded card is read whole as it shows: the open one and the one j goes to next, or every one
    // when all are stacked.
    const following = (card) => card && $$(".stack [data-card]:not(.expired)")
      .find((other) => card.compareDocumentPosition(other) & Node.DOCUMENT_POSITION_FOLLOWING);
    const folded = single()
      ? [shown, following(shown)].map((card) => card && card.closest("section.batch[data-folded]"))
      : $$(".stack section.batch[data-folded]");
    for (const section of folded) if (section) window.countersign.unfold(section);
    return shown;
  }

  function view() {
    const list = $("#inbox-list");
    list.classList.toggle("one-at-a-time", single());
    const toggle = $("[data-view-toggle]");
    if (toggle) {
      toggle.textContent = single() ? "Show every card" : "Show one at a time";
      toggle.hidden = false;
    }
  }

  const rowFor = (id) => id && $(`[data-row-for="${id}"]`);

  // One row takes the Tab stop (the current one, else the first): Tab enters the list once and leaves it
  // for the cards; the arrows and j/k move within it (countersign.js).
  function roving() {
    const rows = $$("[data-row-for]");
    const stop = rows.find((row) => row.hasAttribute("aria-current")) || rows[0];
    for (const row of rows) row.tabIndex = row === stop ? 0 : -1;
  }

  function mark(id) {
    const shown = show(id);
    current = shown ? shown.id.replace("decided-", "interrupt-") : id;
    id = current;
    for (const row of $$("[data-row-for][aria-current]")) row.removeAttribute("aria-current");
    const row = rowFor(id);
    roving();
    if (!row) { where(); return; }
    row.setAttribute("aria-current", "true");
    roving();
    seen.add(id);
    row.classList.remove("new");
    // Keep the row in sight within the list's own scroll, never scrolling the page for it.
    const list = row.closest(".triage");
    if (list && list.scrollHeight > list.clientHeight) {
      const top = row.offsetTop - list.offsetTop, bottom = top + row.offsetHeight;
      if (top < list.scrollTop) list.scrollTop = top;
      else if (bottom > list.scrollTop + list.clientHeight) list.scrollTop = bottom - list.clientHeight;
    }
    count();
    where();
  }

  // Narrower (list, then request): which request of how many is open.
  function where() {
    const said = $("[data-position]");
    if (!said) return;
    const rows = $$("[data-row-for]");
    const at = rows.findIndex((row) => row.hasAttribute("aria-current"));
    said.textContent = at >= 0 ? `Request ${at + 1} of ${rows.length}` : "";
  }

  function listing(on) {
    const list = $("#inbox-list");
    list.classList.toggle("listing", on);
    if (on) {
      const row = $("[data-row-for][aria-current]") || $("[data-row-for]");
      if (row) row.focus();
    }
  }

  // "2 new" at the top of the list, for rows the reader has not opened that came after the page did.
  function count() {
    const marker = $("[data-new-marker]");
    if (!marker) return;
    const fresh = $$("[data-row-for].new");
    marker.hidden = fresh.length === 0;
    $("button", marker).textContent = fresh.length === 1 ? "1 new request: open it" : `${fresh.length} new: open the first`;
  }

  function known(fresh) {
    for (const row of $$("[data-row-for]")) {
      const id = row.dataset.rowFor;
      if (fresh && !seen.has(id)) {
        row.classList.add("new");
        if (!$(".row-new", row)) {
          const tag = document.createElement("span");
          tag.className = "row-new";
          tag.textContent = "new";
          ($(".row-what", row) || row).prepend(tag);
        }
      } else {
        seen.add(id);
      }
    }
    mark(current);
    view();
  }

  function open(row) {
    const card = document.getElementById(row.dataset.rowFor);
    if (!card) return;
    listing(false);
    show(card.id);
    card.scrollIntoView({ block: "start" });
    card.focus({ preventScroll: true });
  }

  document.addEventListener("DOMContentLoaded", () => {
    if (!$("[data-testid=triage]")) return;
    try {  // kept in this browser's storage before the server needed it
      const before = localStorage.getItem(STORED_VIEW);
      if (before) { choose(before); localStorage.removeItem(STORED_VIEW); }
    } catch (opaque) { /* no storage: the cookie alone */ }
    known(false);
    // countersign.js, before it moves the focus to a card: shown first, or the focus would not land.
    document.addEventListener("countersign:reveal", (event) => mark(event.detail.id));
    document.addEventListener("focusin", (event) => {
      const row = event.target.closest && event.target.closest("[data-row-for]");
      const at = event.target.closest && event.target.closest("[data-card], .decided-line");
      if (row) mark(row.dataset.rowFor);
      else if (at) mark(at.id.replace("decided-", "interrupt-"));
    });
    document.addEventListener("click", (event) => {
      if (event.target.closest && event.target.closest("[data-view-toggle]")) {
        choose(single() ? "all" : "one");
        view();
        mark(current);
        return;
      }
      if (event.target.closest && event.target.closest("[data-list-open]")) { listing(true); return; }
      if (event.target.closest && event.target.closest("[data-list-back]")) {
        listing(false);
        const shown = $(".stack [data-open]");
        if (shown) shown.focus();
        return;
      }
      const marker = event.target.closest && event.target.closest("[data-new-marker] button");
      const row = marker ? $("[data-row-for].new") : event.target.closest && event.target.closest("[data-row-for]");
      if (!row || event.ctrlKey || event.metaKey || event.shiftKey) return;
      event.preventDefault();
      open(row);
    });
    // The live list read again: its new rows are news. A filter or a page changes what is listed: not news.
    // A batch read again or answered (a decision, an undo) is new markup: the open request is marked again.
    document.addEventListener("countersign:refreshed", (event) => {
      if (event.detail && event.detail.list && event.detail.list.id === "inbox-list") known(true);
      else mark(current);
    });
    document.body.addEventListener("htmx:afterSwap", (event) => {
      if (event.detail.target && event.detail.target.id === "inbox-list") known(false);
      else mark(current);
    });
  });
})();
