// The Deliveries page, live: when the inbox socket says a webhook delivery was
// queued, tried or sent again ("deliveries", told to staff only), read this
// page again and put its table in place of the shown one. The poke carries
// nothing; the page reads what it shows from the server.
"use strict";

(() => {
  let due = null;
  async function refresh() {
    due = null;
    const shown = document.querySelector("[data-live-deliveries]");
    if (!shown) return;
    const response = await fetch(location.pathname + location.search, { credentials: "same-origin" });
    // A redirect here is to the login page: the session ended, show nothing of it.
    if (!response.ok || response.redirected) return;
    const fresh = new DOMParser().parseFromString(await response.text(), "text/html")
      .querySelector("[data-live-deliveries]");
    if (fresh && !shown.contains(document.activeElement)) {
      shown.replaceWith(fresh);
      fresh.dataset.refreshed = String(Date.now());
    }
  }
  document.addEventListener("countersign:inbox", (event) => {
    // A burst of tries is one read, a quarter second after the last of them.
    if (event.detail && event.detail.type === "deliveries") {
      clearTimeout(due);
      due = setTimeout(refresh, 250);
    }
  });
})();
