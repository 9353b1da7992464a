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
  // A press under way (a pointer down): what would move the page (a field's error shown or cleared as the
  // field loses the focus to the button) waits for it to end, or the button moves between its mousedown and
  // mouseup and never gets the click.
  let pressed = false;
  const waiting = new Map(); // what it changes (a field's error) -> the latest change to it
  const release = () => {
    if (!pressed) return;
    pressed = false;
    setTimeout(() => { // after the click, which may have said newer (a submit's check)
      if (pressed) return;
      const runs = Array.from(waiting.values());
      waiting.clear();
      for (const run of runs) run();
    });
  };
  document.addEventListener("pointerdown", () => { pressed = true; }, true);
  for (const name of ["pointerup", "pointercancel", "dragend"]) document.addEventListener(name, release, true);
  window.addEventListener("blur", release);
  const afterPress = (run, what = Symbol("change")) => {
    waiting.delete(what);
    if (pressed) waiting.set(what, run); else run();
  };
  // A read the server could not answer now (a 503 with Retry-After, a gateway's 502/504) or that never
  // reached it: asked again after the wait it names, so a passing fault never leaves a page showing the past.
  const TRANSIENT = new Set([429, 502, 503, 504]);
  const retryAfter = (response) => {
    const seconds = Number(response ? response.headers.get("Retry-After") : NaN);
    return Math.min(Number.isFinite(seconds) && seconds > 0 ? seconds : 1, 30) * 1000;
  };
  window.countersign = { $, $$, liveSocket: null, enhancers, afterPress, TRANSIENT, retryAfter };
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
  // "1000+" when there are more than the server counts (INBOX_COUNTED), as the page renders it.
  function showPending(mine, more) {
    const count = more ? `${mine}+` : String(mine);
    const badge = $("#pending-badge");
    if (badge) {
      badge.textContent = count;
      badge.setAttribute("aria-label", `${count} waiting for you`);
    }
    document.title = (mine ? `(${count}) ` : "") + document.title.replace(/^\(\d+\+?\) /, "");
  }

  // --- the inbox: refresh the list, keeping any card someone is working on --------
  // Server-rendered fragments (every agent text in them escaped there), parsed inert: scripts never run.
  const parse = (html) => new DOMParser().parseFromString(html, "text/html").body;
  let refreshing = null;
  let retrying = null;
  // Bumped when htmx asks for the list (a filter, a page) and when its answer lands: a live read that
  // overlapped one was made for the old address and would put the unfiltered list back, so it is redone.
  let listAsked = 0;
  const forList = (event) => {
    const target = event.detail.target;
    if (target && target.id === "inbox-list") listAsked += 1;
  };
  function busy(section) {
    return section.contains(document.activeElement) || $$("details[open]", section).length > 0
      || $$("[data-dirty]", section).length > 0
      // A request from inside it is on its way: its answer swaps into this very element.
      || section.matches(".htmx-request") || $$(".htmx-request", section).length > 0;
  }
  // Busy in the narrower sense: working on a card of it (a focus on a decided line or its Undo moves over
  // to the new rendering, see install).
  function working(section) {
    const active = document.activeElement;
    return (section.contains(active) && active.closest("[data-card]") !== null)
      || $$("details[open]", section).length > 0 || $$("[data-dirty]", section).length > 0
      || section.matches(".htmx-request") || $$(".htmx-request", section).length > 0;
  }
  // What the server last rendered of each batch in the page, CSRF tokens aside (each rendering masks its own):
  // a live read that renders one the same leaves it be, rather than replace the buttons under a click.
  const rendered = new WeakMap();
  // (Nor the page's own marks: which card is open, whether the list holds the batch.)
  const markup = (section) => section.outerHTML
    .replace(/name="csrfmiddlewaretoken" value="[^"]*"/g, "").replace(/ data-(open|listed)="[^"]*"/g, "");
  // A batch's members' versions, in order: each only grows, so a rendering with one higher is later.
  const versions = (section) => (section.dataset.versions || "").split(" ").map(Number);
  function newer(a, b) {
    const x = versions(a), y = versions(b);
    return x.length === y.length && x.every((v, i) => v >= y[i]) && x.some((v, i) => v > y[i]);
  }

  // Batches this page decided (or was refused on, told who decided first): they stay in view, where
  // they stood, after the list stops holding them, and follow their resume until it is sent.
  // Section id -> { keep: "decided" | "conflict", timer, tries }.
  const kept = new Map();
  const LINGER = { decided: 10000, conflict: 20000 }; // ms a kept batch stays once it was sent
  const GONE_LINGER = 4000; // ms a batch someone else decided stays, saying who and what
  function keep(section, how) {
    const entry = kept.get(section.id);
    if (entry) clearTimeout(entry.timer);
    kept.set(section.id, { keep: how, timer: null, tries: 0 });
    follow(section);
  }
  // A refusal saying who decided first stays with its batch through every later rendering.
  function carry(from, to) {
    const entry = kept.get(from.id);
    const error = $(".batch-error", from);
    if (!entry || entry.keep !== "conflict" || !error || $(".batch-error", to)) return;
    $(".batch-head", to).after(error.cloneNode(true));
    to.dataset.keep = "conflict";
  }
  async function readBatch(section) {
    const url = section.dataset.batchUrl;
    if (!url) return null;
    try {
      const response = await fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" });
      if (!response.ok || response.redirected) return null;
      return $("section.batch", parse(await response.text()));
    } catch (error) {
      return null;
    }
  }
  function install(section, fresh) {
    carry(section, fresh);
    if (section.classList.contains("gone")) fresh.classList.add("gone");
    // The card shown one at a time (triage.js) shows in the new rendering at once: hidden, it could not take the focus.
    for (const open of $$("[data-open]", section)) {
      const same = open.id && fresh.querySelector(`#${CSS.escape(open.id)}`);
      if (same) same.dataset.open = "";
    }
    const active = document.activeElement;
    const holder = section.contains(active) ? active.closest("[id]") : null;
    section.replaceWith(fresh);
    const again = holder && document.getElementById(holder.id);
    if (again && fresh.contains(again)) again.focus({ preventScroll: true });
    htmx.process(fresh);
    enhance(fresh);
    document.dispatchEvent(new CustomEvent("countersign:refreshed", { detail: { list: fresh.parentNode } }));
    return fresh;
  }
  function later(section, ms, then) {
    const entry = kept.get(section.id);
    if (!entry) return;
    clearTimeout(entry.timer);
    entry.timer = setTimeout(() => { entry.timer = null; then(); }, ms);
  }
  // A kept batch: read it again when its hold ends (and while it is being sent), then let it go a
  // while after it was sent, once the reader is not in it.
  function follow(section) {
    const entry = kept.get(section.id);
    if (!entry || !section.isConnected) { kept.delete(section.id); return; }
    const state = section.dataset.state;
    if (state === "held" || state === "sending") {
      const hold = $("time[data-hold]", section);
      const due = hold ? Date.parse(hold.getAttribute("datetime")) - Date.now() + 300 : 0;
      later(section, Math.max(due, Math.min(700 * 2 ** entry.tries, 5000)), async () => {
        entry.tries += 1;
        const current = document.getElementById(section.id);
        if (!current) { kept.delete(section.id); return; }
        const fresh = await readBatch(current);
        const now = document.getElementById(section.id);
        // Replaced meanwhile (an undo, a decision): the new rendering is followed from its own state.
        if (now !== current) { if (now) follow(now); return; }
        if (fresh && !working(current)) follow(install(current, fresh));
        else if (entry.tries < 30) follow(current);
      });
    } else if (state === "sent" || state === "closed") {
      const leave = () => {
        const current = document.getElementById(section.id);
        if (!current) { kept.delete(section.id); return; }
        if (busy(current) || inList(current)) { later(current, 3000, leave); return; }
        kept.delete(section.id);
        current.remove();
      };
      later(section, LINGER[entry.keep] || LINGER.decided, leave);
    }
    // "open": some of it waits again (an undo): it stays until the reader decides it.
  }
  // A folded batch (its cards as titles: inbox.cards, one request shown at a time) is read whole, in its
  // place, when one of its cards is shown (triage.js). Once; a failed read is tried again when next shown.
  const unfolding = new WeakSet();
  async function unfold(section) {
    if (!section || !section.hasAttribute("data-folded") || unfolding.has(section)) return;
    unfolding.add(section);
    const fresh = await readBatch(section);
    if (!fresh) { unfolding.delete(section); return; }
    // Replaced meanwhile (a live read, a decision): that rendering is what is shown, and asked for if folded.
    if (document.getElementById(section.id) === section) install(section, fresh);
  }
  window.countersign.unfold = unfold;
  // Whether a live read says nothing new of a batch in the page: rendered the same, or rendered folded
  // where the page read it whole, at the same versions and state.
  const unchanged = (section, next, html) => rendered.get(section) === html
    || (next.hasAttribute("data-folded") && !section.hasAttribute("data-folded")
        && next.dataset.versions === section.dataset.versions && next.dataset.state === section.dataset.state);

  // Whether the live list still holds this batch (it then refreshes it like any other).
  const inList = (section) => section.dataset.listed === "1";

  // A batch that left the list, not decided on this page: say who decided it and how, then let it go.
  async function departed(section) {
    section.classList.add("gone");
    const fresh = await readBatch(section);
    if (!section.isConnected) return;
    let shown = section;
    if (fresh && fresh.dataset.state !== "open" && !busy(section)) {
      shown = install(section, fresh);
    } else if (!$(".gone-note", section)) {
      // Someone is working in it: what they type stays, with who decided above it.
      const note = document.createElement("p");
      note.className = "gone-note";
      note.setAttribute("role", "status");
      const said = fresh && fresh.dataset.state !== "open"
        ? $$(".decided .outcome", fresh).map((o) => o.textContent.trim()).join("; ") : "";
      note.textContent = said || "No longer waiting in this list.";
      section.prepend(note);
    }
    const leave = () => {
      if (!shown.isConnected) return;
      if (busy(shown)) { setTimeout(leave, 2000); return; }
      shown.remove();
    };
    setTimeout(leave, GONE_LINGER);
  }

  // Put a batch the list no longer holds back where it stood: after the one before it.
  function place(list, section, afterId) {
    const after = afterId && document.getElementById(afterId);
    if (after && list.contains(after)) { after.after(section); return; }
    const first = $("section.batch", list) || $(".pager", list);
    if (first) first.before(section); else ($("[data-stack]", list) || list).append(section);
  }

  // Who is reviewing a card and who has it open, patched live by presence.js (which stamps data-heard-at):
  // of two renderings of a batch, each card takes these lines from the later, a patch heard after this
  // read was asked for or the read. Text and server-rendered elements only.
  const ATTENTION_LINES = [".claim", ".viewers"];
  function attend(into, from, asked, patchedLater) {
    for (const to of $$("[data-attention]", into)) {
      const source = $(`[data-attention="${to.dataset.attention}"]`, from);
      if (!source) continue;
      const patched = Number((patchedLater ? source : to).dataset.heardAt || 0) > asked;
      if (patched !== patchedLater) continue;
      for (const selector of ATTENTION_LINES) {
        const line = $(selector, to), said = $(selector, source);
        if (line && said) line.replaceChildren(...Array.from(said.childNodes, (node) => node.cloneNode(true)));
      }
      to.dataset.claimedBy = source.dataset.claimedBy || "";
      if (patchedLater) to.dataset.heardAt = source.dataset.heardAt;
    }
  }

  async function refreshInbox() {
    const list = $("#inbox-list");
    if (!list) return;
    if (refreshing) { refreshing.again = true; return; }
    refreshing = { again: false };
    const asked = listAsked;
    const askedAt = performance.now();
    try {
      let response = null;
      try {
        // The inbox reads its own address (filters and page); the thread page, the list it names.
        response = await fetch(list.dataset.listUrl || location.pathname + location.search, {
          headers: { "HX-Request": "true", "HX-Target": "inbox-list" }, credentials: "same-origin",
        });
      } catch (error) { /* not reached: asked again below */ }
      if (!response || TRANSIENT.has(response.status)) {
        clearTimeout(retrying);
        retrying = setTimeout(refreshInbox, retryAfter(response));
        return;
      }
      // A redirect here is to the login page: the session ended, show nothing of it.
      if (!response.ok || response.redirected) return;
      const fresh = parse(await response.text());
      if (asked !== listAsked) { refreshing.again = true; return; }
      const incoming = new Map($$("section.batch", fresh).map((s) => [s.id, s]));
      // Moving a kept batch out of the page and back blurs whatever had the focus in it: the
      // reader typing a comment would type into nothing, and presence would say they left the card.
      const focused = document.activeElement;
      const leaving = [];
      let before = null;
      for (const section of incoming.values()) section.dataset.listed = "1";
      const said = new Map(Array.from(incoming.values(), (section) => [section, markup(section)]));
      for (const section of $$("section.batch", list)) {
        const next = incoming.get(section.id);
        if (!next) {
          section.dataset.listed = "0";
          leaving.push([section, before]);
        } else if (unchanged(section, next, said.get(next))) {
          // Unchanged: the one in the page stays (its fields, its focus, a click under way), as read.
          section.dataset.listed = "1";
          attend(section, next, askedAt, false);
          next.replaceWith(section);
        } else if (busy(section) || newer(section, next)) {
          // Someone is working in it, or this list was read before a change the batch already shows.
          section.dataset.listed = "1";
          // Kept as it is, but who is reviewing it and who has it open is as the read says.
          if (!newer(section, next)) attend(section, next, askedAt, false);
          next.replaceWith(section);
        } else {
          carry(section, next);
          attend(next, section, askedAt, true);
          const entry = kept.get(section.id);
          if (entry && entry.keep !== "conflict" && next.dataset.state === "open") kept.delete(section.id);
        }
        before = section.id;
      }
      for (const [section, html] of said) if (fresh.contains(section)) rendered.set(section, html);
      list.replaceChildren(...fresh.childNodes);
      for (const [section, after] of leaving) {
        place(list, section, after);
        if (kept.has(section.id)) follow(section);
        else if (!section.classList.contains("gone")) departed(section);
      }
      if (focused && focused !== document.activeElement && list.contains(focused)) focused.focus({ preventScroll: true });
      // A triage row is new markup each read: the reader moving along the list stays on the same request's row.
      const row = focused && focused.dataset && focused.dataset.rowFor
        && !list.contains(focused) && $(`[data-row-for="${CSS.escape(focused.dataset.rowFor)}"]`, list);
      if (row) row.focus({ preventScroll: true });
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

  // --- countdowns: expiries, and how long a decision is held for an undo ----------------------
  // A span as the server's from_now filter says it (templatetags: _span): "4 min", "1 h 20 min", "2 h",
  // "3 d"; the last minute counts down in seconds, when they matter.
  function span(seconds) {
    if (seconds < 60) return `${seconds} s`;
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return `${minutes} min`;
    const hours = Math.floor(minutes / 60), rest = minutes % 60;
    if (hours < 3) return rest ? `${hours} h ${rest} min` : `${hours} h`;
    return hours < 24 ? `${hours} h` : `${Math.floor(hours / 24)} d`;
  }

  function tick() {
    const now = Date.now();
    for (const time of $$("time[data-hold]")) {
      const left = Math.ceil((Date.parse(time.getAttribute("datetime")) - now) / 1000);
      time.textContent = left > 0 ? `${left} s` : "a moment";
    }
    for (const time of $$("time[data-left]")) {
      const left = Math.round((Date.parse(time.getAttribute("datetime")) - now) / 1000);
      time.textContent = left > 0 ? `${span(left)} left` : "expired";
    }
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
        time.textContent = `in ${span(left)}`;
      }
    }
  }

  // --- keyboard ---------------------------------------------------------------------------
  // A control a key may press: enabled and shown (not inside a closed <details>, not disabled while edits wait).
  const pressable = (control) => !control.disabled && control.getAttribute("aria-disabled") !== "true"
    && !control.closest("fieldset:disabled") && control.getClientRects().length > 0;
  // Before the focus goes to a card: the triage list (triage.js) shows it first when it shows one at a time.
  const reveal = (card) => document.dispatchEvent(new CustomEvent("countersign:reveal", { detail: card }));
  const inView = (element) => {
    const box = element.getBoundingClientRect();
    return box.bottom > 0 && box.top < window.innerHeight && box.height > 0;
  };
  // The card after (or before) where the reader is: a card, a decided line, a triage row or nothing yet.
  function step(cards, active, by) {
    if (!cards.length) return null;
    const row = active.closest ? active.closest("[data-row-for]") : null;
    const at = (row && document.getElementById(row.dataset.rowFor)) || (active.closest && active.closest("[data-card], .decided-line"));
    if (!at || at === document.body) return by > 0 ? cards[0] : cards[cards.length - 1];
    const index = cards.indexOf(at);
    if (index >= 0) return cards[Math.min(Math.max(index + by, 0), cards.length - 1)];
    // A decided line: the first card after it in the page (or the last before it).
    const follows = (card) => at.compareDocumentPosition(card) & Node.DOCUMENT_POSITION_FOLLOWING;
    return by > 0 ? cards.find(follows) || null : cards.filter((card) => !follows(card)).pop() || null;
  }
  function keyboard(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    // A ticked box is not typing: "decide anyway", ticked with the space bar, is followed by `a` (as `x` is in bulk.js).
    const active = document.activeElement;
    const typing = /^(TEXTAREA|SELECT)$/.test(active.tagName) || active.isContentEditable
      || (active.tagName === "INPUT" && active.type !== "checkbox");
    const current = active.closest ? active.closest("[data-card]") : null;
    // Esc in a card's field or control gives the focus back to the card, where j/k and the action keys work.
    if (event.key === "Escape" && current && active !== current) {
      event.preventDefault();
      current.focus();
      return;
    }
    if (typing) return;
    const cards = $$("[data-card]:not(.expired)");
    // A key decides only the card that is open and in view: never one scrolled away or not yet read.
    const press = (key) => {
      const control = current && inView(current) && $$(`[data-key="${key}"]`, current).find(pressable);
      if (control) { event.preventDefault(); control.click(); }
    };
    // The arrows move like j/k from a card, a decision's line or its triage row, not from a control.
    const moving = { j: 1, k: -1, ArrowDown: 1, ArrowUp: -1 }[event.key];
    const row = active.closest ? active.closest("[data-row-for]") : null;
    if (moving && row) {
      // In the triage list the keys move along it, and the card beside follows; Enter opens it (triage.js).
      const rows = $$("[data-row-for]");
      const next = rows[Math.min(Math.max(rows.indexOf(row) + moving, 0), rows.length - 1)];
      event.preventDefault();
      next.focus();
      const card = document.getElementById(next.dataset.rowFor);
      if (card) { reveal(card); card.scrollIntoView({ block: "nearest" }); }
      return;
    }
    if (moving && (event.key.length === 1 || active === document.body || active.matches("[data-card], .decided-line"))) {
      const next = step(cards, active, moving);
      if (next) { event.preventDefault(); reveal(next); next.focus(); }
      return;
    }
    switch (event.key) {
      case "a": case "r": case "d": press(event.key); break;
      case "u": {
        // Undo the decision whose line has the focus (the view stays on it after a key decides).
        const undo = active.matches(".decided-line") && $$("button.undo", active).find(pressable);
        if (undo) { event.preventDefault(); undo.click(); }
        break;
      }
      case "e": {
        const edit = current && $("details[data-edit]", current);
        if (edit) {
          event.preventDefault();
          if (!edit.open) $("summary", edit).click();
          const field = $$("input:not([type=hidden]), textarea, select", edit).find(pressable);
          if (field) field.focus();
        }
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

  // --- a press the server could not take: said where it was pressed, never dropped in silence ---------------
  // 503 (and 429) mean nothing was done: pressed again after the wait the server names, a few times. A
  // gateway's 502/504 or no answer at all leave it unknown: the reader is told, and presses again (a second
  // decision is refused as already taken, a second claim changes nothing).
  const PRESSES = 3;
  const tries = new WeakMap(); // the form (or control) -> presses the server turned away in a row
  function unanswered(event, response) {
    const config = event.detail.requestConfig || {};
    const elt = config.elt || event.detail.elt;
    if (!elt || !elt.isConnected) return;
    const submitter = config.triggeringEvent && config.triggeringEvent.submitter;
    const where = elt.closest("[data-card]") || elt.closest("section.batch") || elt.parentNode;
    let said = $(":scope > [data-testid=request-failed]", where);
    if (!said) {
      said = document.createElement("p");
      said.className = "error-text request-failed";
      said.setAttribute("role", "alert");
      said.dataset.testid = "request-failed";
      where.prepend(said);
    }
    const status = response ? response.status : 0;
    const count = (tries.get(elt) || 0) + 1;
    const again = submitter || (elt.matches("form") ? null : elt);
    if ((status === 503 || status === 429) && count < PRESSES && again) {
      tries.set(elt, count);
      const wait = retryAfter(response);
      said.textContent = `The server is busy, so nothing was done yet: trying again in ${Math.ceil(wait / 1000)} s.`;
      setTimeout(() => { if (again.isConnected) again.click(); }, wait);
      return;
    }
    tries.delete(elt);
    said.textContent = status === 503 || status === 429
      ? "The server is still busy, so nothing was done: press again in a moment."
      : status ? `The server could not answer (error ${status}), so this may not have been done: press again to make sure.`
        : "The server could not be reached, so this may not have been done: check the connection, then press again.";
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const section of $$("#inbox-list section.batch")) rendered.set(section, markup(section));
    document.body.addEventListener("htmx:responseError", (event) => {
      const xhr = event.detail.xhr;
      // A busy server or a broken one in between (a refusal of ours comes back as a page htmx swaps).
      if (!xhr || (xhr.status < 500 && xhr.status !== 429)) return;
      unanswered(event, { status: xhr.status, headers: { get: (name) => xhr.getResponseHeader(name) } });
    });
    document.body.addEventListener("htmx:sendError", (event) => unanswered(event, null));
    document.body.addEventListener("htmx:afterRequest", (event) => {
      const elt = event.detail.requestConfig && event.detail.requestConfig.elt;
      if (event.detail.successful && elt) tries.delete(elt);
    });
    enhance();
    setInterval(tick, 1000);
    document.addEventListener("keydown", keyboard);
    // A claim, a decision or an undo answered by htmx replaces the batch around the button just pressed,
    // and the focus would fall to the page: j/k would start again from the top, presence would drop the
    // card. A card still there keeps the focus (a claim, a refusal); a card decided gives it to the next
    // card; an undo gives it to the card it brought back.
    document.body.addEventListener("htmx:beforeRequest", forList);
    document.body.addEventListener("htmx:afterSwap", forList);
    // When each htmx request was sent: a claim's or a viewer's patch heard after it is newer than its answer.
    const sentAt = new WeakMap();
    document.body.addEventListener("htmx:beforeRequest", (event) => {
      if (event.detail.xhr) sentAt.set(event.detail.xhr, performance.now());
    });
    let swapped = null;
    document.body.addEventListener("htmx:beforeSwap", (event) => {
      const target = event.detail.target;
      swapped = null;
      if (!target || !target.matches || !target.matches("section.batch")) return;
      // The element that sent the request (the form); detail.elt is the target the event fires on.
      const from = event.detail.requestConfig && event.detail.requestConfig.elt;
      const active = document.activeElement;
      const inCard = (node) => (node && node.closest ? node.closest("[data-card]") : null);
      const card = inCard(from) || inCard(active);
      const undone = from && from.closest ? from.closest("[data-undo-for]") : null;
      const cards = $$("[data-card]:not(.expired)");
      const at = card ? cards.indexOf(card) : -1;
      swapped = {
        id: target.id,
        card: card && target.contains(card) ? card.id : null,
        following: at < 0 ? [] : [...cards.slice(at + 1), ...cards.slice(0, at).reverse()].map((c) => c.id),
        restore: undone ? `interrupt-${undone.dataset.undoFor}` : null,
        held: target.contains(active),
        asked: event.detail.xhr ? sentAt.get(event.detail.xhr) : undefined,
        lines: document.createElement("div"),
      };
      swapped.lines.append(...$$("[data-attention]", target).map((holder) => holder.cloneNode(true)));
    });
    document.body.addEventListener("htmx:afterSwap", (event) => {
      const was = swapped;
      swapped = null;
      const section = was && document.getElementById(was.id);
      enhance(section || event.detail.target.parentNode || document);
      if (!section) return;
      // htmx wires the new content only when it settles (20 ms on): a key pressed on the card this
      // gives the focus to must already send through htmx, not as a plain form.
      htmx.process(section);
      // The answer was rendered when the request was sent: a patch heard since says more.
      if (was.asked !== undefined) attend(section, was.lines, was.asked, true);
      if (section.dataset.keep) keep(section, section.dataset.keep);
      const restored = was.restore && document.getElementById(was.restore);
      const same = was.card && document.getElementById(was.card);
      if (restored) { restored.focus(); return; }
      if (same) { if (!same.contains(document.activeElement)) same.focus({ preventScroll: true }); return; }
      if (!was.card && !was.held) return;
      // The card is gone (decided here, or by someone first): the focus stays on what happened (its line,
      // with Undo), so the next key never decides a card the reader has not seen; j moves on.
      const line = (was.card && document.getElementById(was.card.replace("interrupt-", "decided-")))
        || $(".batch-error", section);
      if (line) { line.focus(); return; }
      const next = was.following.map((id) => document.getElementById(id)).find((c) => c && !c.classList.contains("expired"));
      if (next) { reveal(next); next.focus(); }
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
          if (message.mine !== undefined) showPending(message.mine, message.more);
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
