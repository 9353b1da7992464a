// The inbox's folded filters: the disclosure's summary says which are on. htmx re-reads only the list
// when a filter changes, so the summary the server wrote would go stale; this rewrites it from the
// fields' own data-summary wording ("agent {}": {} is the chosen option's text). Text only, never markup.
"use strict";

(() => {
  const ELLIPSIS_AFTER = 24;

  function said(field) {
    const template = field.dataset.summary;
    if (field.type === "checkbox") return field.checked ? template : "";
    if (field.tagName === "SELECT") {
      if (!field.value || field.value === field.dataset.default) return "";
      return template.replace("{}", field.selectedOptions[0] ? field.selectedOptions[0].text.trim() : field.value);
    }
    const value = field.value.trim();
    if (!value) return "";
    return template.replace("{}", value.length > ELLIPSIS_AFTER ? value.slice(0, ELLIPSIS_AFTER - 1) + "…" : value);
  }

  function summarise(form) {
    const summary = form.querySelector("[data-filter-summary]");
    if (!summary) return;
    const parts = Array.from(form.querySelectorAll("[data-summary]")).map(said).filter(Boolean);
    const spans = (parts.length ? parts.map((part) => ` · ${part}`) : [": none"]).map((text) => {
      const span = document.createElement("span");
      span.textContent = text;
      return span;
    });
    summary.replaceChildren(...spans);
  }

  // A chip removed (or the back button) changed the address, not the form: the fields follow the address.
  function follow(form) {
    const params = new URLSearchParams(location.search);
    for (const field of form.querySelectorAll("select[name], input[name]")) {
      if (field.type === "hidden" || field.type === "submit") continue;
      const value = params.get(field.name) || "";
      if (field.type === "checkbox") field.checked = value !== "";
      else if (field.tagName === "SELECT") field.value = value || (field.dataset.default || "");
      else field.value = value;
    }
    summarise(form);
  }

  document.addEventListener("DOMContentLoaded", () => {
    for (const form of document.querySelectorAll("form[data-filters]")) {
      form.addEventListener("change", () => summarise(form));
      document.body.addEventListener("htmx:pushedIntoHistory", () => follow(form));
    }
  });
})();
