// The thread page, live: append what the log has beyond the last sequence
// seen (ws/threads/<id>/ pokes), the decisions taken since (in place, after
// their run's end), the Runs list, the refused answers, and whether a new run may start.
// Everything inserted is our server's rendered fragment; agent text arrives escaped in it.
"use strict";

(() => {
  const { $, $$, liveSocket, TRANSIENT, retryAfter } = window.countersign;

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
      let wait = 0;
      try {
        while (wanted > lastSeq || forced) {
          forced = false;
          let response = null;
          try {
            response = await fetch(`${history.dataset.eventsUrl}?after=${lastSeq}`, { credentials: "same-origin" });
          } catch (error) { /* not reached: asked again below */ }
          if (!response || TRANSIENT.has(response.status)) {
            wait = retryAfter(response);
            break;
          }
          if (!response.ok || response.redirected || !response.headers.has("X-Last-Seq")) {
            if (status) status.textContent = "logged out: reload the page to log in";
            wanted = lastSeq; // stop asking until something new is announced
            break;
          }
          const html = await response.text();
          const reached = Number(response.headers.get("X-Last-Seq"));
          appendHistory(history, html);
          settled = !unsettled(history);
          setStartAllowed(response.headers.get("X-Pending") !== "1");
          refreshRefused(response.headers.get("X-Refused"));
          if (reached <= lastSeq) break;
          lastSeq = reached;
          history.dataset.lastSeq = String(lastSeq);
        }
      } finally {
        fetching = false;
        // The server busy or out of reach: asked again when it says (the log loses nothing meanwhile).
        if (wait) setTimeout(() => catchUp(true), wait);
        // An event announced but not yet readable (its commit raced our read): try again.
        else if (wanted > lastSeq || forced) setTimeout(catchUp, 200);
        else settle();
      }
    }

    // A run's status commits just after its last event (and a success announces
    // nothing more): while the Runs list says a run that has ended still streams,
    // look again soon, less and less often, until the 5 s check takes over.
    let settled = !unsettled(history);
    let settleDelay = 250;
    let settleTimer = null;
    function settle() {
      if (settled) { settleDelay = 250; return; }
      if (settleTimer || settleDelay > 4000) return;
      settleTimer = setTimeout(() => { settleTimer = null; catchUp(true); }, settleDelay);
      settleDelay *= 2;
    }

    settle();
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
    holder.innerHTML = html; // our server's rendering of the thread (thread_events), never agent text itself
    // Follow the newest only if the reader is at the end already: someone reading back stays where they are.
    const following = window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 120;
    let added = false;
    for (const element of Array.from(holder.children)) {
      if (element.dataset.part === "runs") { replaceRuns(element); continue; }
      if (element.hasAttribute("data-decisions")) { placeDecisions(history, element); continue; }
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
      added = true;
    }
    window.countersign.enhance(history);
    if (added && following) window.scrollTo({ top: document.documentElement.scrollHeight });
  }

  // A run's decisions: replaced when they changed (a new one, one withdrawn), else
  // put right after their run's end. Before that end is shown they wait for it: it brings them along.
  function placeDecisions(history, element) {
    const key = CSS.escape(element.dataset.decisions);
    const shown = history.querySelector(`[data-decisions="${key}"]`);
    if (shown) {
      if (shown.dataset.version !== element.dataset.version) shown.replaceWith(element);
      return;
    }
    const end = history.querySelector(`[data-run-end="${key}"]`);
    if (end) end.after(element);
  }

  // The Runs list, when what it says changed (its forms' tokens differ on every rendering, not its words).
  function replaceRuns(fresh) {
    const list = document.getElementById("runs");
    if (!list) return;
    const words = (element) => Array.from(element.children, (li) => `${li.dataset.status}:${li.textContent.replace(/\s+/g, " ").trim()}`).join("|");
    if (words(list) !== words(fresh)) list.replaceWith(fresh);
  }

  // A run the Runs list says is still going, whose end the history already shows.
  function unsettled(history) {
    return $$("#runs li[data-status=streaming], #runs li[data-status=queued]")
      .some((li) => history.querySelector(`[data-run-end="${CSS.escape(li.dataset.run)}"]`));
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
        $("[data-pending-list]", reason).textContent = "the last run's requests";
      }
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    const history = $("#history");
    if (history) threadLive(history);
  });
})();
