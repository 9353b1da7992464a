// Countersign's pages, live: the inbox and the header badge over ws/inbox/, the
// thread history over ws/threads/<id>/, schema forms, countdowns, shortcuts.
//
// The WebSockets carry pokes ("something changed at sequence N"), never the
// record: every page reads what it has not seen from the server, so a dropped
// message or a reconnect never loses or repeats anything.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  // Page modules (forms.js, thread.js) add what they make of new content here; enhance() runs each.
  const enhancers = [];
  window.countersign = { $, $$, liveSocket: null, enhancers };
  // --- a WebSocket that reconnects with backoff --------------------------------
  function liveSocket(path, { onMessage, onOpen, onState }) {
    let delay = 500;
    let stopped = false;
    let socket = null;
    function connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      socket = new WebSocket(`${scheme}//${location.host}${path}`);
      socket.onopen = () => { delay = 500; onState && onState("live"); onOpen && onOpen(); };
      socket.onmessage = (event) => onMessage(JSON.parse(event.data));
      socket.onclose = (event) => {
        if (event.code === 4401) { onState && onState("logged out: reload the page to log in"); return; }
        if (stopped) return;
        onState && onState("reconnecting…");
        setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    connect();
    return {
      stop: () => { stopped = true; },
      // False while (re)connecting: the caller says it again from onOpen.
      send: (message) => {
        if (!socket || socket.readyState !== WebSocket.OPEN) return false;
        socket.send(JSON.stringify(message));
        return true;
      },
    };
  }

  // --- the header badge and the tab title ---------------------------------------
  function showPending(count) {
    const badge = $("#pending-badge");
    if (badge) {
      badge.textContent = count;
      badge.setAttribute("aria-label", `${count} waiting for you`);
    }
    document.title = (count ? `(${count}) ` : "") + document.title.replace(/^\(\d+\) /, "");
  }

  // --- the inbox: refresh the list, keeping any card someone is working on --------
  let refreshing = null;
  function busy(section) {
    return section.contains(document.activeElement) || $$("details[open]", section).length > 0
      || $$("[data-dirty]", section).length > 0;
  }
  async function refreshInbox() {
    const list = $("#inbox-list");
    if (!list) return;
    if (refreshing) { refreshing.again = true; return; }
    refreshing = { again: false };
    try {
      const response = await fetch(location.pathname + location.search, {
        headers: { "HX-Request": "true", "HX-Target": "inbox-list" }, credentials: "same-origin",
      });
      // A redirect here is to the login page: the session ended, show nothing of it.
      if (!response.ok || response.redirected) return;
      const fresh = document.createElement("div");
      fresh.innerHTML = await response.text();
      const freshIds = new Set($$("section.batch", fresh).map((s) => s.id));
      // Batches decided elsewhere: say so. One someone is working on stays
      // (sending it is answered with who decided first); the others fade away.
      const leaving = [];
      for (const section of $$("section.batch", list)) {
        if (freshIds.has(section.id)) continue;
        if (!section.classList.contains("gone")) {
          section.classList.add("gone");
          const note = document.createElement("p");
          note.className = "gone-note";
          note.setAttribute("role", "status");
          note.textContent = "Decided elsewhere.";
          section.prepend(note);
        }
        leaving.push(section);
      }
      // Moving a kept batch out of the page and back blurs whatever had the focus in it: the
      // reader typing a comment would type into nothing, and presence would say they left the card.
      const focused = document.activeElement;
      for (const section of $$("section.batch", fresh)) {
        const current = document.getElementById(section.id);
        if (current && busy(current)) section.replaceWith(current);
      }
      list.replaceChildren(...fresh.childNodes);
      if (focused && focused !== document.activeElement && list.contains(focused)) focused.focus({ preventScroll: true });
      for (const section of leaving) {
        list.append(section);
        if (!busy(section)) setTimeout(() => section.remove(), 1500);
      }
      htmx.process(list);
      enhance(list);
      // For the page's other modules (selection, presence): the cards were replaced.
      document.dispatchEvent(new CustomEvent("countersign:refreshed", { detail: { list } }));
    } finally {
      const again = refreshing.again;
      refreshing = null;
      if (again) refreshInbox();
    }
  }

  // --- expiry countdowns ---------------------------------------------------------------
  function tick() {
    const now = Date.now();
    for (const time of $$("time[data-countdown]")) {
      const left = Math.round((Date.parse(time.getAttribute("datetime")) - now) / 1000);
      const card = time.closest("[data-card]");
      if (left <= 0) {
        time.textContent = "now: expired";
        if (card && !card.classList.contains("expired")) {
          card.classList.add("expired");
          for (const control of $$("button, input, textarea, select", card)) control.disabled = true;
          const note = document.createElement("p");
          note.className = "warning";
          note.textContent = "This request expired and can no longer be answered.";
          card.append(note);
        }
      } else {
        const h = Math.floor(left / 3600), m = Math.floor((left % 3600) / 60), s = left % 60;
        time.textContent = `in ${h ? h + "h " : ""}${m ? m + "m " : ""}${s}s`;
      }
    }
  }

  // --- keyboard ---------------------------------------------------------------------------
  function keyboard(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    // A ticked box is not typing: "decide anyway", ticked with the space bar, is followed by `a` (as `x` is in bulk.js).
    const active = document.activeElement;
    const typing = /^(TEXTAREA|SELECT)$/.test(active.tagName) || active.isContentEditable
      || (active.tagName === "INPUT" && active.type !== "checkbox");
    if (typing) return;
    const cards = $$("[data-card]:not(.expired)");
    const current = document.activeElement.closest ? document.activeElement.closest("[data-card]") : null;
    const index = cards.indexOf(current);
    const press = (key) => {
      const control = current && $(`[data-key="${key}"]`, current);
      if (control) { event.preventDefault(); control.click(); }
    };
    switch (event.key) {
      case "j": if (cards.length) { event.preventDefault(); cards[Math.min(index + 1, cards.length - 1)].focus(); } break;
      case "k": if (cards.length) { event.preventDefault(); cards[Math.max(index - 1, 0)].focus(); } break;
      case "a": case "r": case "c": press(event.key); break;
      case "e": {
        const summary = current && $("details[data-edit] > summary", current);
        if (summary) { event.preventDefault(); summary.click(); const area = $("textarea", current); if (area) area.focus(); }
        break;
      }
      case "?": { event.preventDefault(); const dialog = $("#shortcuts"); if (dialog) dialog.showModal(); break; }
    }
  }

  function enhance(root = document) {
    for (const enhancer of enhancers) enhancer(root);
    tick();
  }
  window.countersign.liveSocket = liveSocket;
  window.countersign.enhance = enhance;

  document.addEventListener("DOMContentLoaded", () => {
    enhance();
    setInterval(tick, 1000);
    document.addEventListener("keydown", keyboard);
    // A claim or a decision answered by htmx replaces the batch around the button just pressed, and the
    // focus would fall to the page: j/k would start again from the top, presence would drop the card.
    let focusedCard = null;
    document.body.addEventListener("htmx:beforeSwap", (event) => {
      const card = document.activeElement.closest ? document.activeElement.closest("[data-card]") : null;
      focusedCard = card && event.detail.target.contains(card) ? card.id : null;
    });
    document.body.addEventListener("htmx:afterSwap", (event) => {
      enhance(event.detail.target.parentNode || document);
      const card = focusedCard && document.getElementById(focusedCard);
      if (card && !card.contains(document.activeElement)) card.focus({ preventScroll: true });
      focusedCard = null;
    });
    document.body.addEventListener("htmx:load", (event) => enhance(event.detail.elt));
    const help = $("[data-action=shortcuts]");
    if (help) help.addEventListener("click", () => $("#shortcuts").showModal());

    if (document.body.dataset.liveInbox) {
      const inbox = liveSocket(document.body.dataset.liveInbox, {
        onMessage: (message) => {
          // For the page's other modules: every message the inbox socket hears.
          document.dispatchEvent(new CustomEvent("countersign:inbox", { detail: message }));
          // The badge counts what waits for this reader; "changed" carries only the total, "mine" follows it.
          if (message.mine !== undefined) showPending(message.mine);
          if (message.type !== "changed") return;
          refreshInbox();
          // Interrupts raised, decided or expired on the thread shown: recheck it.
          const shown = $("#history");
          if (shown && shown.refreshLive && String(message.thread) === shown.dataset.threadPk) shown.refreshLive();
        },
        // After a reconnect, changes may have been missed while offline.
        onOpen: () => {
          // Changes made between the page's render and this socket's first
          // opening were heard by nobody, as were those while it reconnected:
          // read the list again either way (a page without one reads nothing).
          refreshInbox();
          document.dispatchEvent(new CustomEvent("countersign:inbox-open"));
        },
      });
      // Other modules talk on the same socket (presence): one socket per page.
      window.countersignInbox = inbox;
    }
  });
})();
