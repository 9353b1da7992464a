// Bulk decisions in the inbox: tick cards (click, shift-click for a range, `x` on
// the focused card) or all matching the filter, then approve, reject or cancel
// them in one action. The form (templates/interrupts/_bulk_bar.html) works
// without this script; this keeps the selection across live refreshes, sends
// it without a reload and shows the summary in place.
//
// The selection is a Set of interrupt pks, not the checkboxes: countersign.js
// replaces the list on every change, so the boxes are re-ticked from the Set
// after each refresh (countersign:refreshed) and each htmx swap.
"use strict";

(() => {
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  document.addEventListener("DOMContentLoaded", () => {
    const form = $("form[data-bulk]");
    if (!form) return;
    const result = $("#bulk-result");
    const count = $("[data-bulk-count]", form);
    const everything = $("[data-bulk-everything]", form);
    const clear = $("[data-bulk-clear]", form);
    const selected = new Set();
    let anchor = null; // the last box ticked by hand: a shift-click selects from it

    // The receipt's Close: the toast goes, and the focus back to the list rather than to the page.
    result.addEventListener("click", (event) => {
      if (!event.target.closest("[data-bulk-dismiss]")) return;
      result.replaceChildren();
      const list = $("#inbox-list");
      if (list) list.focus({ preventScroll: true });
    });
    const boxes = () => $$("input[data-bulk-pick]");
    // As the list says it: "12", or "1000+" past what the inbox counts.
    const total = () => {
      const shown = $("[data-testid=inbox-count]");
      return shown ? shown.textContent.trim() : "0";
    };

    function apply() {
      const all = everything.checked;
      for (const box of boxes()) {
        box.checked = all || selected.has(box.value);
        box.disabled = all; // "all matching" decides what is ticked; untick it to pick by hand
        const card = box.closest("[data-card]");
        if (card) card.classList.toggle("picked", box.checked);
      }
      const held = total();
      $("[data-bulk-total]", form).textContent = held;
      if (all) count.textContent = `All ${held} matching this filter selected.`;
      else if (selected.size) count.textContent = `${selected.size} selected.`;
      else count.textContent = "Tick cards to decide several at once.";
      form.classList.toggle("active", all || selected.size > 0);
      clear.hidden = !(all || selected.size);
    }

    function pick(box, on) {
      if (on) selected.add(box.value); else selected.delete(box.value);
    }

    // A click (by mouse, or by `x`): with shift, every box between the last one and this one follows it.
    document.addEventListener("click", (event) => {
      const box = event.target.closest && event.target.closest("input[data-bulk-pick]");
      if (!box) return;
      const all = boxes();
      if (event.shiftKey && anchor && all.includes(anchor) && anchor !== box) {
        const [from, to] = [all.indexOf(anchor), all.indexOf(box)].sort((a, b) => a - b);
        for (const between of all.slice(from, to + 1)) pick(between, box.checked);
      } else {
        pick(box, box.checked);
      }
      anchor = box;
      apply();
    });

    // `x` toggles the focused card. Its own listener: countersign.js's keyboard handler is the page's others.
    document.addEventListener("keydown", (event) => {
      if (event.key !== "x" || event.ctrlKey || event.metaKey || event.altKey) return;
      const active = document.activeElement;
      const typing = (/^(TEXTAREA|SELECT)$/.test(active.tagName) || active.isContentEditable
        || (active.tagName === "INPUT" && active.type !== "checkbox"));
      if (typing) return;
      const card = active.closest && active.closest("[data-card]");
      const box = card && $("input[data-bulk-pick]", card);
      if (!box || box.disabled) return;
      event.preventDefault();
      box.checked = !box.checked;
      pick(box, box.checked);
      anchor = box;
      apply();
    });

    // A card the reader just decided on its own is no longer theirs to pick.
    document.body.addEventListener("htmx:afterRequest", (event) => {
      const path = (event.detail.pathInfo && event.detail.pathInfo.requestPath) || "";
      if (!event.detail.successful || !/\/interrupts\/\d+\/decide\//.test(path)) return;
      const card = event.detail.elt && event.detail.elt.closest && event.detail.elt.closest("[data-card]");
      const box = card && $("input[data-bulk-pick]", card);
      if (box) { selected.delete(box.value); apply(); }
    });
    everything.addEventListener("change", apply);
    clear.addEventListener("click", () => {
      selected.clear();
      everything.checked = false;
      anchor = null;
      apply();
    });

    // The list was replaced (a live refresh, a filter, a page, a batch decided): tick the boxes again.
    document.addEventListener("countersign:refreshed", apply);
    document.body.addEventListener("htmx:afterSwap", apply);
    // Another filter: "all matching" meant the old one, and cards it no longer shows are no longer picked.
    document.body.addEventListener("htmx:pushedIntoHistory", () => {
      everything.checked = false;
      const shown = new Set(boxes().map((box) => box.value));
      for (const pk of Array.from(selected)) if (!shown.has(pk)) selected.delete(pk);
      apply();
    });

    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const body = new FormData(form, event.submitter);
      // Every card picked, also those a refresh took off the page (decided elsewhere): the summary says so.
      body.delete("ids");
      if (!everything.checked) for (const pk of selected) body.append("ids", pk);
      const buttons = $$("button[type=submit]", form);
      buttons.forEach((button) => { button.disabled = true; });
      try {
        // The filter is the one the page shows now (htmx may have changed it since the page loaded).
        const response = await fetch(form.dataset.actionBase + location.search, {
          method: "POST", body, credentials: "same-origin", headers: { "HX-Request": "true" },
        });
        if (response.redirected) { result.textContent = "Logged out: reload the page to log in."; return; }
        const text = await response.text();
        if (response.ok || response.status === 400) {
          result.innerHTML = text; // our own partial, every agent-supplied string escaped by the template
          document.dispatchEvent(new CustomEvent("countersign:bulk")); // the foot of the screen is its
          if (window.htmx) window.htmx.process(result); // its Undo posts through htmx, into this same toast
        } else {
          result.textContent = `The bulk decision failed (HTTP ${response.status}); nothing more was changed.`;
        }
        if (response.ok) {
          selected.clear();
          everything.checked = false;
          anchor = null;
          $("input[name=comment]", form).value = "";
          if (window.htmx && $("#inbox-list")) {
            window.htmx.ajax("GET", location.pathname + location.search, { target: "#inbox-list", swap: "innerHTML" });
          }
        }
      } catch (problem) {
        result.textContent = "The bulk decision could not be sent: check the connection, then try again.";
      } finally {
        buttons.forEach((button) => { button.disabled = false; });
        apply();
      }
    });

    // Whatever the browser kept ticked across a reload is not what this page selected.
    everything.checked = false;
    apply();
  });
})();
