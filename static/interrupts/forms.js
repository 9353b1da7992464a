// Answer and edit forms on inbox cards: forms built from an interrupt's
// responseSchema (json-editor), the edited-arguments editor, and the guard
// that lets only our own buttons submit a form built from an agent's schema.
"use strict";

(() => {
  const { $, $$ } = window.countersign;

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


  window.countersign.enhancers.push((root) => {
    $$("form[data-schema-form]", root).forEach(enhanceSchemaForm);
    $$("textarea[data-json-editor]", root).forEach(enhanceEditArgs);
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
  });
})();
