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

  // --- the thread page: append what the log has beyond the last sequence seen ------
  function threadLive(history) {
    let lastSeq = Number(history.dataset.lastSeq || 0);
    let fetching = false;
    let wanted = 0;
    let forced = false;
    const status = $("[data-live-status]");

    async function catchUp(force = false) {
      if (force) forced = true; // ask even if no event is known to be missing
      if (fetching) return;
      fetching = true;
      try {
        while (wanted > lastSeq || forced) {
          forced = false;
          const response = await fetch(`${history.dataset.eventsUrl}?after=${lastSeq}`, { credentials: "same-origin" });
          if (!response.ok || response.redirected || !response.headers.has("X-Last-Seq")) {
            if (status) status.textContent = "logged out: reload the page to log in";
            wanted = lastSeq; // stop asking until something new is announced
            break;
          }
          const html = await response.text();
          const reached = Number(response.headers.get("X-Last-Seq"));
          appendHistory(history, html);
          setStartAllowed(response.headers.get("X-Pending") !== "1");
          refreshRefused(response.headers.get("X-Refused"));
          if (reached <= lastSeq) break;
          lastSeq = reached;
          history.dataset.lastSeq = String(lastSeq);
        }
      } finally {
        fetching = false;
        // An event announced but not yet readable (its commit raced our read): try again.
        if (wanted > lastSeq || forced) setTimeout(catchUp, 200);
      }
    }

    history.refreshLive = () => catchUp(true);
    // A dropped poke is noticed at the next one; the last pokes of a run have
    // no next one, so also look now and then while the page is visible.
    setInterval(() => { if (document.visibilityState === "visible") catchUp(true); }, 5000);
    liveSocket(history.dataset.ws, {
      onState: (text) => { if (status) status.textContent = text; },
      onMessage: (message) => {
        const seq = message.type === "hello" ? message.last_seq : message.seq;
        if (seq > wanted) wanted = seq;
        catchUp();
      },
    });
  }

  function appendHistory(history, html) {
    const holder = document.createElement("div");
    holder.innerHTML = html;
    for (const element of Array.from(holder.children)) {
      if (element.dataset.seq && history.querySelector(`[data-seq="${element.dataset.seq}"]`)) continue; // seen
      if (element.hasAttribute("data-continues")) {
        const key = element.dataset.message || element.dataset.call;
        const target = element.dataset.message
          ? history.querySelector(`[data-message="${CSS.escape(key)}"] .text`)
          : history.querySelector(`[data-call="${CSS.escape(key)}"] .args`);
        const piece = element.querySelector(".text, .args");
        if (target && piece) { target.textContent += piece.textContent; continue; }
      }
      history.append(element);
    }
    enhance(history);
    window.scrollTo({ top: document.body.scrollHeight });
  }

  // The thread's answers the agent refused: fetched again when their count changed.
  async function refreshRefused(count) {
    const section = document.getElementById("refused");
    const history = $("#history");
    if (!section || count === null || section.dataset.count === count || !history) return;
    const response = await fetch(`${history.dataset.eventsUrl}?part=refused`, { credentials: "same-origin" });
    if (!response.ok || response.redirected) return;
    const holder = document.createElement("div");
    holder.innerHTML = await response.text();
    const fresh = holder.querySelector("#refused");
    if (!fresh) return;
    section.replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
  }

  function setStartAllowed(allowed) {
    const form = $("[data-start-run]");
    if (!form) return;
    $("button[type=submit]", form).disabled = !allowed;
    const reason = $("[data-blocked-reason]", form);
    if (reason) {
      reason.hidden = allowed;
      if (!allowed && !$("[data-pending-list]", reason).textContent) {
        $("[data-pending-list]", reason).textContent = "the interrupts of the last run";
      }
    }
  }

  // --- forms generated from a responseSchema (json-editor) --------------------------
  const editors = new WeakMap();
  const stash = new Map(); // interrupt id -> the answer last sent, to restore after a refusal

  function safeSchema(schema) {
    const copy = JSON.parse(JSON.stringify(schema));
    if (copy && typeof copy === "object" && !copy.title) copy.title = "Answer";
    return copy;
  }

  // json-editor compiles schema strings (headerTemplate, links, enumSource,
  // watch) with a template engine; the server sends none of them (see
  // interrupts/protocol/inert.py), and should one get through, this engine
  // makes every template render nothing.
  const NO_TEMPLATES = { compile: () => () => "" };

  function makeEditor(holder, schema, startval) {
    if (!window.JSONEditor) return null;
    const options = {
      schema: safeSchema(schema), theme: "html", iconlib: null, disable_edit_json: true,
      disable_properties: true, disable_collapse: true, disable_array_delete_all_rows: true,
      prompt_before_delete: false, show_errors: "change", no_additional_properties: false,
      required_by_default: false, display_required_only: false, show_opt_in: false,
      // Never fetch a $ref (the server inlines the local ones and drops the rest),
      // never cache schemas in localStorage, never call a named callback.
      ajax: false, ajax_cache_responses: false, template: NO_TEMPLATES, enable_array_copy: false,
      // Its theme rules go into a <style> element the CSP refuses (style-src
      // 'self'): the few our forms use are in countersign.css.
      disable_theme_rules: true,
    };
    if (startval !== undefined) options.startval = startval;
    return new window.JSONEditor(holder, options);
  }

  function showServerErrors(editor, card) {
    const data = $(".error[data-errors]", card);
    if (!editor || !data) return;
    const errors = JSON.parse(data.dataset.errors).map((e) => ({
      path: "root" + (e.path || "").replaceAll("/", "."), property: "server", message: e.message,
    }));
    editor.setOption && editor.setOption("show_errors", "always");
    if (editor.root && editor.root.showValidationErrors) editor.root.showValidationErrors(errors);
  }

  function enhanceSchemaForm(form) {
    if (form.dataset.enhanced) return;
    form.dataset.enhanced = "1";
    const card = form.closest("[data-card]");
    const holder = $(".schema-editor[data-schema]", form);
    if (!holder) return; // no form for this schema (past the server's bounds): the JSON answer stays
    const schema = JSON.parse(holder.dataset.schema);
    const key = card && card.id; // unique per interrupt row, unlike the agent's interrupt id
    const editor = makeEditor(holder, schema, stash.get(key));
    if (!editor) return;
    $(".fallback", form).hidden = true;
    editors.set(form, editor);
    // Typing marks the card as being worked on: live refreshes leave it alone.
    form.addEventListener("input", () => { if (card) card.dataset.dirty = "1"; });
    editor.on("change", () => { if (card && editor.ready) card.dataset.dirty = "1"; });
    editor.on("ready", () => showServerErrors(editor, card));
    form.addEventListener("htmx:confirm", (event) => {
      // json-editor reads a field on "change"; a submit by Enter, or before the
      // field lost focus, would otherwise send the previous value.
      for (const field of $$("input, select, textarea", $(".schema-editor", form))) {
        field.dispatchEvent(new Event("change", { bubbles: true }));
      }
      const problems = editor.validate(editor.getValue()); // with a value: validated now, not last frame
      if (problems.length) {
        event.preventDefault();
        editor.setOption("show_errors", "always");
        editor.root.showValidationErrors(problems);
        const first = $(".errmsg, .je-form-input-label + .errmsg", form);
        if (first) first.scrollIntoView({ block: "center" });
      }
    });
    form.addEventListener("htmx:configRequest", (event) => {
      const value = editor.getValue();
      stash.set(key, value);
      event.detail.parameters.payload = JSON.stringify(value);
    });
  }

  function enhanceEditArgs(textarea) {
    if (textarea.dataset.enhanced) return;
    textarea.dataset.enhanced = "1";
    const form = textarea.form;
    form.addEventListener("htmx:confirm", (event) => {
      try {
        const value = JSON.parse(textarea.value);
        if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error("not an object");
        textarea.setCustomValidity("");
      } catch (problem) {
        event.preventDefault();
        textarea.setCustomValidity("The edited arguments must be one JSON object.");
        textarea.reportValidity();
      }
    });
    textarea.addEventListener("input", () => textarea.setCustomValidity(""));
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
    $$("form[data-schema-form]", root).forEach(enhanceSchemaForm);
    $$("textarea[data-json-editor]", root).forEach(enhanceEditArgs);
    tick();
  }

  // --- what a form built from an agent's schema may submit -----------------------------
  // json-editor builds markup inside the answer form from the agent's schema.
  // The server reduces the schema to an allow-list; should markup ever slip
  // through regardless, it still cannot send a decision: a submit is only ever
  // by one of our own buttons, to the form's own address, and htmx processes
  // nothing inside the editor (hx-disable on its container).
  function foreignSubmit(form, submitter) {
    if (!submitter) return false;
    if (submitter.closest(".schema-editor")) return true;
    return ["formaction", "formmethod", "formtarget", "formenctype", "hx-post", "hx-get", "hx-put"]
      .some((name) => submitter.hasAttribute(name));
  }
  document.addEventListener("submit", (event) => {
    // Capture phase on the document: before htmx's own listener on the form.
    if (foreignSubmit(event.target, event.submitter)) {
      event.preventDefault();
      event.stopImmediatePropagation();
    }
  }, true);
  document.addEventListener("htmx:configRequest", (event) => {
    const elt = event.detail.elt;
    const form = elt && elt.closest && elt.closest("form[data-schema-form]");
    if (!form) return;
    if (elt.closest(".schema-editor") || event.detail.path !== form.getAttribute("hx-post")) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", () => {
    if (window.JSONEditor) {
      // json-editor strips tags by parsing text as HTML; agent text must never be parsed.
      const asText = (text) => (text === undefined || text === null ? "" : String(text));
      if (window.JSONEditor.AbstractEditor) window.JSONEditor.AbstractEditor.prototype.cleanText = asText;
      if (window.JSONEditor.AbstractTheme) window.JSONEditor.AbstractTheme.prototype.cleanText = asText;
      // Schema options may name callbacks by string; there are none to name.
      if (window.JSONEditor.defaults) window.JSONEditor.defaults.callbacks = {};
      // Its hidden labels and opt-in boxes get inline style attributes, which
      // the CSP refuses (and reports): a class does the same.
      const theme = window.JSONEditor.AbstractTheme && window.JSONEditor.AbstractTheme.prototype;
      if (theme) {
        const hidden = (tag, text) => {
          const element = document.createElement(tag);
          element.textContent = asText(text);
          element.className = "je-visually-hidden";
          return element;
        };
        theme.getHiddenLabel = (text) => hidden("label", text);
        theme.getHiddenText = (text) => hidden("span", text);
        theme.visuallyHidden = (element) => { if (element) element.classList.add("je-visually-hidden"); };
        theme.getOptInCheckbox = function (name) {
          const container = document.createElement("span");
          const label = this.getHiddenLabel(`${name} opt-in`);
          label.setAttribute("for", `${name}-opt-in`);
          label.textContent = `${name}-opt-in`;
          const checkbox = document.createElement("input");
          checkbox.setAttribute("type", "checkbox");
          checkbox.setAttribute("id", `${name}-opt-in`);
          checkbox.classList.add("json-editor-opt-in");
          container.append(checkbox, label);
          return { label, checkbox, container };
        };
      }
    }
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
    const history = $("#history");
    if (history) threadLive(history);
  });
})();
