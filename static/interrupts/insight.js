// The insight page: its figures are read again when the inbox changes (a request raised, decided, expired).
// countersign.js owns the page's one socket and announces each message as "countersign:inbox"; this only listens.
(() => {
  "use strict";
  // A burst of decisions (a bulk approve) is one refresh, not one per message.
  const SETTLE_MS = 800;

  document.addEventListener("DOMContentLoaded", () => {
    const figures = document.getElementById("insight-figures");
    if (!figures) return;
    let timer = null;
    let loading = null;

    async function refresh() {
      if (loading) { loading.again = true; return; }
      loading = { again: false };
      try {
        const url = new URL(window.location.href);
        url.searchParams.set("period", figures.dataset.period);
        url.searchParams.set("part", "figures");
        const response = await fetch(url, { headers: { Accept: "text/html" }, credentials: "same-origin" });
        // A failed read keeps the figures shown: the next change tries again.
        if (!response.ok) return;
        // Our own server's rendering of the figures, every agent-supplied text escaped there; no script in it.
        figures.innerHTML = await response.text();
        figures.dataset.refreshed = String(Number(figures.dataset.refreshed || 0) + 1);
        document.dispatchEvent(new CustomEvent("countersign:insight-refreshed"));
      } finally {
        const again = loading.again;
        loading = null;
        if (again) refresh();
      }
    }

    function soon() {
      clearTimeout(timer);
      timer = setTimeout(refresh, SETTLE_MS);
    }

    document.addEventListener("countersign:inbox", (event) => {
      if (event.detail && event.detail.type === "changed") soon();
    });
    // After a reconnect, changes may have been missed while offline.
    document.addEventListener("countersign:inbox-open", soon);
  });
})();
