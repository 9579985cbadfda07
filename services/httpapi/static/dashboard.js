// Cairn dashboard: keeps a study's or a job's page live from the study's event stream.
// The server renders every view; on an event that concerns this page, its live parts are
// fetched again (the same page, so there is one renderer) and swapped in place.
(() => {
  "use strict";
  const main = document.querySelector("main");
  const study = main && main.dataset.study;
  if (!study || !window.EventSource) return;
  const job = main.dataset.job || null;
  const live = job ? ["job-state", "rounds", "plot", "workers", "timeline"]
                   : ["live-state", "jobs"];
  let pending = false, again = false;

  async function refresh() {
    if (pending) { again = true; return; }
    pending = true;
    try {
      const answer = await fetch(window.location.pathname, { credentials: "same-origin" });
      if (!answer.ok) return;
      const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
      for (const id of live) {
        const now = document.getElementById(id), next = fresh.getElementById(id);
        if (now && next) now.replaceWith(document.importNode(next, true));
      }
      document.body.dataset.updated = String(Date.now());
      document.body.dataset.seq = main.dataset.lastSeen || "";
    } finally {
      pending = false;
      if (again) { again = false; refresh(); }
    }
  }

  const after = main.dataset.seq || "0";
  const source = new EventSource(
    `/v1/studies/${encodeURIComponent(study)}/events?after=${encodeURIComponent(after)}`);
  source.addEventListener("entry", (message) => {
    const entry = JSON.parse(message.data);
    main.dataset.lastSeen = String(entry.seq);
    if (!job || entry.job === job) refresh();
  });
  source.onopen = () => { document.body.dataset.live = "open"; };
  source.onerror = () => { document.body.dataset.live = "reconnecting"; };
})();
