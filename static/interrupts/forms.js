// A card's forms (_card_actions.html): the answer form built from an interrupt's
// responseSchema (json-editor), Edit & approve with a field per argument, the one
// comment box that goes with whichever action sends, what is typed kept across a
// refusal, and the guard that lets only our own buttons submit a form built from an
// agent's schema.
"use strict";

(() => {
  const { $, $$ } = window.countersign;

  // --- json-editor, made safe and honest before any form is built ----------------------
  // At load, not on DOMContentLoaded: countersign.js builds the page's forms in its own
  // DOMContentLoaded handler, which runs before any this file would add (a form built
  // unpatched parsed the agent's text as HTML and set style attributes the CSP refuses).
  const asText = (text) => (text === undefined || text === null ? "" : String(text));

  // json-editor's error messages, plainly (it adds the full stop).
  const PLAIN_ERRORS = {
    error_type: "Enter {{0}}", error_notset: "Required", error_notempty: "Required",
    error_enum: "Pick one of the choices", error_required: "Fill in {{0}}",
    error_minimum_incl: "Enter {{0}} or more", error_maximum_incl: "Enter {{0}} or less",
    error_minimum_excl: "Enter more than {{0}}", error_maximum_excl: "Enter less than {{0}}",
    error_multipleOf: "Enter a multiple of {{0}}", error_minLength: "Enter at least {{0}} characters",
    error_maxLength: "Use at most {{0}} characters", error_pattern: "This is not in the form asked for",
    error_date: "Enter a date as {{0}}", error_minItems: "Add at least {{0}}", error_maxItems: "Keep at most {{0}}",
    error_uniqueItems: "Each entry must differ from the others",
    error_additional_properties: "{{0}} is not one of the fields asked for",
  };
  const KIND_WORDS = { integer: "a whole number", number: "a number", string: "text", boolean: "yes or no",
                       array: "a list", object: "the fields asked for", null: "nothing" };

  function harden(JSONEditor) {
    if (!JSONEditor) return;
    // json-editor strips tags by parsing text as HTML; agent text must never be parsed.
    if (JSONEditor.AbstractEditor) JSONEditor.AbstractEditor.prototype.cleanText = asText;
    if (JSONEditor.AbstractTheme) JSONEditor.AbstractTheme.prototype.cleanText = asText;
    // Schema options may name callbacks by string; there are none to name.
    if (JSONEditor.defaults) JSONEditor.defaults.callbacks = {};
    // A text field shows its errors the first time it is validated, touched or not (its
    // "previous setting" starts unset): on load, "Value must be at least 2000" under an
    // empty year. Starting it at the setting in use waits for a change, or the submit.
    const kinds = (JSONEditor.defaults && JSONEditor.defaults.editors) || {};
    if (kinds.string) kinds.string.prototype.previous_error_setting = "interaction";
    // Its messages in a reviewer's words, not a schema's ("Value must be of type integer").
    const english = JSONEditor.defaults && JSONEditor.defaults.languages && JSONEditor.defaults.languages.en;
    if (english) Object.assign(english, PLAIN_ERRORS);
    const translate = JSONEditor.defaults && JSONEditor.defaults.translate;
    if (translate) {
      JSONEditor.defaults.translate = function (key, variables, schema) {
        const said = key === "error_type" && Array.isArray(variables)
          ? variables.map((kind) => KIND_WORDS[kind] || kind) : variables;
        return translate.call(this, key, said, schema);
      };
    }
    // A field starts with what the agent gave (the schema's default or const, the
    // start value) or empty: json-editor's own start is 0 for a required number, ""
    // for a text, false for a yes/no and the first choice of a list, all shown as
    // if someone had chosen them.
    if (JSONEditor.AbstractEditor) {
      JSONEditor.AbstractEditor.prototype.getDefault = function () {
        if (this.enforceConstEnabled && this.schema.const !== undefined) return this.schema.const;
        if (this.schema.default !== undefined) return this.schema.default;
        const type = Array.isArray(this.schema.type) ? this.schema.type[0] : this.schema.type;
        return { object: {}, array: [], null: null }[type];
      };
    }
    // A required field left empty is said at the field ("Required", once it is touched
    // or on submit), not as "Object is missing the required property" over the form
    // from the moment it opens.
    if (kinds.object) {
      const show = kinds.object.prototype.showValidationErrors;
      kinds.object.prototype.showValidationErrors = function (errors) {
        const value = this.getValue() || {};
        const others = errors.filter((error) => !(error.path === this.path && error.property === "required"));
        const missing = (Array.isArray(this.schema.required) ? this.schema.required : [])
          .filter((key) => this.editors && this.editors[key] && value[key] === undefined)
          .map((key) => ({ path: `${this.path}.${key}`, property: "required", message: "Required" }));
        return show.call(this, [...others, ...missing]);
      };
    }
    const theme = JSONEditor.AbstractTheme && JSONEditor.AbstractTheme.prototype;
    if (theme) {
      // Its hidden labels and opt-in boxes get inline style attributes, which
      // the CSP refuses (and reports): a class does the same.
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
    // An error is said in words tied to its field (aria-describedby, aria-invalid), in
    // our colours (the theme's inline red is 3.99:1 and overrides the stylesheet).
    const html = JSONEditor.defaults && JSONEditor.defaults.themes && JSONEditor.defaults.themes.html;
    if (html) {
      html.prototype.addInputError = function (input, text) {
        window.countersign.afterPress(() => addError(input, text, this), input);
      };
      html.prototype.removeInputError = function (input) {
        window.countersign.afterPress(() => {
          input.removeAttribute("aria-invalid");
          if (input.errmsg) input.errmsg.hidden = true;
        }, input);
      };
      const addError = (input, text, theme) => {
        const group = theme.closest(input, ".form-control") || input.controlgroup || input.parentNode;
        if (!input.errmsg) {
          input.errmsg = document.createElement("div");
          input.errmsg.className = "errmsg";
          if (input.id) input.errmsg.id = `${input.id}-error`;
          group.appendChild(input.errmsg);
        }
        input.errmsg.hidden = false;
        input.errmsg.textContent = asText(text);
        input.setAttribute("aria-invalid", "true");
        if (input.errmsg.id) {
          const described = (input.getAttribute("aria-describedby") || "").split(" ").filter(Boolean);
          if (!described.includes(input.errmsg.id)) input.setAttribute("aria-describedby", [...described, input.errmsg.id].join(" "));
        }
      };
    }
  }
  harden(window.JSONEditor);

  // --- schemas as people read them ----------------------------------------------------
  // "due_date", "dueDate", "due-date" -> "Due date"; "URL" and "ID" stay capitals.
  function humanize(key) {
    const words = String(key).replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_\-.\s]+/g, " ").trim().split(" ");
    const text = words.map((word) => (word.length > 1 && word === word.toUpperCase() ? word : word.toLowerCase())).join(" ");
    return text ? text[0].toUpperCase() + text.slice(1) : String(key);
  }

  // A copy of the (server-reduced) schema with our own presentation added: a title
  // for every property (its key in words, when the agent gave none), and a blank
  // first choice for a list or a yes/no without a default, so nothing is chosen
  // for the reviewer. The agent's schema carries no `options` (inert.py drops
  // them): those set here are ours.
  function prepare(schema, rootTitle) {
    const copy = JSON.parse(JSON.stringify(schema));
    const walk = (node, key) => {
      if (!node || typeof node !== "object" || Array.isArray(node)) return;
      if (key !== undefined && typeof node.title !== "string") node.title = humanize(key);
      const choices = Array.isArray(node.enum) || node.type === "boolean";
      if (choices && node.default === undefined) {
        node.options = { has_placeholder_option: true, placeholder_option_text: "Choose…" };
      }
      if (node.type === "boolean") node.options = { ...(node.options || {}), enum_titles: ["Yes", "No"] };
      if (node.properties && typeof node.properties === "object") {
        for (const [name, sub] of Object.entries(node.properties)) walk(sub, name);
      }
      if (node.items && !Array.isArray(node.items)) walk(node.items);
      for (const list of ["oneOf", "anyOf", "allOf"]) if (Array.isArray(node[list])) node[list].forEach((sub) => walk(sub));
    };
    walk(copy);
    if (copy && typeof copy === "object" && typeof copy.title !== "string") copy.title = rootTitle;
    return copy;
  }

  // json-editor compiles schema strings (headerTemplate, links, enumSource,
  // watch) with a template engine; the server sends none of them (see
  // interrupts/protocol/inert.py), and should one get through, this engine
  // makes every template render nothing.
  const NO_TEMPLATES = { compile: () => () => "" };

  function makeEditor(holder, schema, startval, rootTitle) {
    if (!window.JSONEditor) return null;
    const options = {
      schema: prepare(schema, rootTitle), theme: "html", iconlib: null, disable_edit_json: true,
      disable_properties: true, disable_collapse: true, disable_array_delete_all_rows: true,
      disable_array_delete_last_row: true, prompt_before_delete: false,
      // Errors after a field is changed, or on submit (then "always"); never on load.
      show_errors: "interaction",
      // Never a value the agent did not give: no 0 for a number, no "" for a
      // text, no first choice of a list (json-editor's defaults for each type).
      use_default_values: false,
      no_additional_properties: false, required_by_default: false, display_required_only: false, show_opt_in: false,
      // Never fetch a $ref (the server inlines the local ones and drops the rest),
      // never cache schemas in localStorage, never call a named callback.
      ajax: false, ajax_cache_responses: false, template: NO_TEMPLATES, enable_array_copy: false,
      // Its theme rules go into a <style> element the CSP refuses (style-src
      // 'self'): the few our forms use are in countersign.css and forms.css.
      disable_theme_rules: true,
    };
    if (startval !== undefined && startval !== null) options.startval = startval;
    return new window.JSONEditor(holder, options);
  }

  // json-editor reads a text field on "change"; a submit by Enter, or before the
  // field lost focus, would otherwise send the previous value. (Not a list: a change
  // of one still showing "Choose…" would pick its first choice.)
  function commit(holder) {
    for (const field of $$("input:not([type=checkbox]):not([type=radio]), textarea", holder)) {
      field.dispatchEvent(new Event("change", { bubbles: true }));
    }
  }

  // Returns whether the editor's value is valid; shows every error if not.
  function check(editor, holder) {
    commit(holder);
    const problems = editor.validate(editor.getValue()); // with a value: validated now, not last frame
    if (!problems.length) return true;
    editor.setOption("show_errors", "always");
    editor.root.showValidationErrors(problems);
    const first = $(".errmsg:not([hidden])", holder);
    const field = first && first.parentNode && $("input, select, textarea", first.parentNode);
    if (field) field.focus();
    if (first) first.scrollIntoView({ block: "center" });
    return false;
  }

  const canonical = (value) => JSON.stringify(value, (key, item) => (item && typeof item === "object" && !Array.isArray(item)
    ? Object.fromEntries(Object.keys(item).sort().map((name) => [name, item[name]])) : item));

  // --- what is typed survives a refusal -------------------------------------------------
  // A decision answered with a refusal re-renders its batch: the card comes back with
  // the error, and what was typed into the old one (comment, answer, edits) is put back.
  const drafts = new Map(); // card id -> { node, comment, payload, edits }

  function draft(card) {
    if (!drafts.has(card.id) || drafts.get(card.id).node !== card) drafts.set(card.id, { node: card });
    return drafts.get(card.id);
  }

  // The saved draft of a card rendered anew, if it came back refused; consumed either way.
  function takeDraft(card) {
    const saved = drafts.get(card.id);
    if (!saved || saved.node === card) return null;
    drafts.delete(card.id);
    return $("[data-testid=card-error]", card) ? saved : null;
  }

  const commentBox = (card) => card && $("input[data-comment]", card);

  // --- the answer form ------------------------------------------------------------------
  const editors = new WeakMap(); // form -> its json-editor

  function showServerErrors(editor, card) {
    const data = $(".error[data-errors]", card);
    if (!editor || !data) return;
    const errors = JSON.parse(data.dataset.errors).map((e) => ({
      path: "root" + (e.path || "").replaceAll("/", "."), property: "server", message: e.message,
    }));
    editor.setOption("show_errors", "always");
    if (editor.root && editor.root.showValidationErrors) editor.root.showValidationErrors(errors);
  }

  function enhanceAnswerForm(form, card, saved) {
    const holder = $(".schema-editor[data-schema]", form);
    if (!holder) return; // no form for this schema (past the server's bounds): the JSON answer stays
    const start = saved && saved.payload !== undefined ? saved.payload
      : holder.dataset.start ? JSON.parse(holder.dataset.start) : undefined;
    const editor = makeEditor(holder, JSON.parse(holder.dataset.schema), start, "Answer");
    if (!editor) return;
    $(".fallback", form).hidden = true;
    editors.set(form, editor);
    // Typing marks the card as being worked on: live refreshes leave it alone.
    editor.on("change", () => { if (card && editor.ready && holder.contains(document.activeElement)) card.dataset.dirty = "1"; });
    form.addEventListener("input", (event) => { if (card && holder.contains(event.target)) card.dataset.dirty = "1"; });
    editor.on("ready", () => showServerErrors(editor, card));
    form.addEventListener("htmx:confirm", (event) => {
      // Only the answer is checked: Cancel sends no answer, whatever the form holds.
      const submitter = event.detail.triggeringEvent && event.detail.triggeringEvent.submitter;
      if (!submitter || submitter.value !== "respond") return;
      if (!check(editor, holder)) event.preventDefault();
    });
    form.addEventListener("htmx:configRequest", (event) => {
      event.detail.parameters.payload = JSON.stringify(editor.getValue() ?? {});
    });
  }

  // --- Edit & approve -------------------------------------------------------------------
  // While edits are pending (the form differs from the proposal, or a preview is
  // shown) the plain Approve is disabled on the button itself: a click, or `a`, would
  // approve the unedited arguments under a diff that says otherwise.
  function setPending(card, pending) {
    // Also held while a policy wants long args read first and they are not (looked.js, data-look-first).
    card.dataset.editsPending = pending ? "yes" : "";
    const unread = card.dataset.lookFirst === "waiting";
    for (const button of $$("form.actions button[value=approve]", card)) button.disabled = pending || unread;
    const note = $("[data-edits-pending]", card);
    if (note) note.hidden = !pending;
    for (const control of $$("[data-discard-edits]", card)) control.hidden = !pending;
    if (pending) card.dataset.dirty = "1";
  }

  function enhanceEditForm(form, card, saved) {
    const details = form.closest("details[data-edit]");
    const textarea = $("textarea[name=edited_args]", form);
    const jsonPart = $("[data-edit-json]", form);
    const preview = details && $(".edit-preview", details);
    const holder = $(".edit-editor[data-schema]", form);
    const original = textarea.value;
    const proposed = holder ? JSON.parse(holder.dataset.proposed) : null;
    let editor = null;

    const parsed = (text) => { try { return canonical(JSON.parse(text)); } catch (problem) { return text; } };
    const before = proposed !== null ? canonical(proposed) : parsed(original);
    // As data, not text: the same arguments re-indented (Edit as JSON) are no edit.
    const current = () => (editor ? canonical(editor.getValue()) : parsed(textarea.value));
    const edited = () => current() !== before;
    const previewed = () => Boolean(preview && $("[data-testid=edit-diff]", preview));
    const refresh = () => setPending(card, edited() || previewed());
    let reviewed = null; // what the form held when it was sent for the preview
    const stale = () => {
      // The preview shows edits that are no longer the form's: its final click must not send them.
      if (previewed() && current() !== reviewed) preview.replaceChildren();
      refresh();
    };

    const asJson = (value) => {
      if (editor) { editor.destroy(); editor = null; }
      if (holder) holder.hidden = true;
      if (value !== undefined) textarea.value = JSON.stringify(value, null, 2);
      jsonPart.hidden = false;
      const toJson = $("[data-edit-as-json]", form);
      if (toJson) toJson.hidden = true;
    };

    if (holder && window.JSONEditor) {
      const start = saved && saved.edits && saved.edits.value !== undefined ? saved.edits.value : proposed;
      editor = makeEditor(holder, JSON.parse(holder.dataset.schema), start, "Edited arguments");
    }
    if (editor) {
      jsonPart.hidden = true;
      const toJson = $("[data-edit-as-json]", form);
      editor.on("ready", () => {
        // A form that cannot give the proposal back unchanged would edit what nobody
        // touched (a value it cannot show, a key it drops): the JSON is edited instead.
        const untouched = !(saved && saved.edits);
        if (untouched && canonical(editor.getValue()) !== canonical(proposed)) { asJson(); refresh(); return; }
        if (toJson) toJson.hidden = false;
        refresh();
      });
      editor.on("change", () => { if (editor && editor.ready) stale(); });
      if (toJson) toJson.addEventListener("click", () => { asJson(editor.getValue()); textarea.focus(); refresh(); });
    } else if (saved && saved.edits && saved.edits.text !== undefined) {
      textarea.value = saved.edits.text;
    }
    // Typing is an edit at once (json-editor takes a field's value only when it loses
    // focus): Approve is disabled, and a preview of what the form held before is gone.
    form.addEventListener("input", () => {
      textarea.setCustomValidity("");
      if (previewed()) preview.replaceChildren();
      if (editor) setPending(card, true); else refresh();
    });

    form.addEventListener("htmx:confirm", (event) => {
      if (editor) {
        if (!check(editor, holder)) event.preventDefault();
        return;
      }
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
    form.addEventListener("htmx:configRequest", (event) => {
      if (editor) event.detail.parameters.edited_args = JSON.stringify(editor.getValue() ?? {});
      reviewed = current();
    });
    if (preview) preview.addEventListener("htmx:afterSwap", refresh);
    if (preview) preview.addEventListener("htmx:afterSettle", refresh);

    const discard = $("[data-discard-edits]", form);
    if (discard) discard.addEventListener("click", () => {
      if (editor) editor.setValue(proposed);
      textarea.value = original;
      if (preview) preview.replaceChildren();
      setPending(card, false);
      delete card.dataset.dirty;
      if (details) { details.open = false; $("summary", details).focus(); }
    });

    if (details) {
      // Opening it with a click puts the cursor in its first field (`e` does so itself). "toggle" comes a
      // task later: by then the reader may have pressed Esc back to the card, and the focus stays theirs.
      details.addEventListener("toggle", () => {
        const active = document.activeElement;
        if (!details.open || (active !== $("summary", details) && active !== document.body)) return;
        const first = $$("input, select, textarea", form).find((field) => field.type !== "hidden" && field.offsetParent !== null);
        if (first) first.focus();
      });
      if (saved && saved.edits) details.open = true;
    }
    if (saved && saved.edits) refresh();
  }

  // --- one comment, whichever form sends -------------------------------------------------
  // Approve, Reject, Cancel and an answer share the card's form, and its comment box.
  // The other forms that decide from a card (approve with edits, approve a colleague's
  // answer) get the box's text added here. Every decision keeps a draft of what was
  // typed until its answer is in: a refusal puts it back.
  document.addEventListener("htmx:configRequest", (event) => {
    const elt = event.detail.elt;
    const card = elt && elt.closest && elt.closest("[data-card]");
    if (!card || event.detail.verb !== "post") return;
    const main = $("form.actions", card);
    if (!main || event.detail.path !== main.getAttribute("hx-post")) return; // a preview or a claim: no decision
    const box = commentBox(card);
    const form = elt.closest("form");
    if (box && form !== main && box.value.trim()) event.detail.parameters.comment = box.value;
    const saved = draft(card);
    saved.comment = box ? box.value : "";
    const editor = editors.get(main);
    if (editor) saved.payload = editor.getValue();
    const answer = $("textarea[name=payload]", main);
    if (answer) saved.answerText = answer.value;
    const edit = $("form[data-edit-form]", card);
    if (edit && form !== main) {
      const holder = $(".edit-editor", edit);
      const text = $("textarea[name=edited_args]", edit);
      const value = event.detail.parameters.edited_args;
      saved.edits = holder && !holder.hidden && value ? { value: JSON.parse(value) } : { text: text ? text.value : "" };
    }
  });

  function enhanceCard(card) {
    if (card.dataset.formsEnhanced) return;
    card.dataset.formsEnhanced = "1";
    // The comment fields for pages without scripts: htmx parses what it swaps in with
    // scripting off, which makes a <noscript>'s content real fields of the form.
    for (const element of $$("noscript", card)) element.remove();
    const saved = takeDraft(card);
    const box = commentBox(card);
    if (saved && box && !box.value) box.value = saved.comment || "";
    const answerText = $("form.actions textarea[name=payload]", card);
    if (saved && answerText && saved.answerText !== undefined) answerText.value = saved.answerText;
    const answer = $("form.actions[data-schema-form]", card);
    if (answer) enhanceAnswerForm(answer, card, saved);
    const edit = $("form[data-edit-form]", card);
    if (edit) enhanceEditForm(edit, card, saved);
    if (box) box.addEventListener("input", () => { card.dataset.dirty = "1"; });
  }

  // --- what a form built from an agent's schema may submit -----------------------------
  // json-editor builds markup inside the answer form from the agent's schema.
  // The server reduces the schema to an allow-list; should markup ever slip
  // through regardless, it still cannot send a decision: a submit is only ever
  // by one of our own buttons, to the form's own address, and htmx processes
  // nothing inside the editor (hx-disable on its container).
  function foreignSubmit(form, submitter) {
    if (!submitter) return false;
    if (submitter.closest(".schema-editor, .edit-editor")) return true;
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
    const form = elt && elt.closest && elt.closest("form[data-schema-form], form[data-edit-form]");
    if (!form) return;
    if (elt.closest(".schema-editor, .edit-editor") || event.detail.path !== form.getAttribute("hx-post")) event.preventDefault();
  });

  window.countersign.enhancers.push((root) => {
    const cards = root.matches && root.matches("[data-card]") ? [root] : $$("[data-card]", root);
    cards.forEach(enhanceCard);
    // A decision whose card did not come back (decided, or gone): nothing to put back.
    for (const [id, saved] of drafts) if (!document.getElementById(id) && !saved.node.isConnected) drafts.delete(id);
  });
})();
