// The anarchon dashboard: polls api/state and renders it. Store text only ever becomes text nodes
// (textContent, never innerHTML), so a job name or an error message cannot inject markup.
"use strict";
(() => {
  const config = JSON.parse(document.body.dataset.config);
  const byId = (id) => document.getElementById(id);
  let countdowns = [];  // {node, at (performance.now() ms), done (text once elapsed)}
  let fetchedAt = 0;
  let busy = false;
  let sequence = 0;
  let elapsed = false;
  let lastEarly = 0;

  if (config.read_only) document.body.classList.add("read-only");
  byId("store").textContent = `namespace ${config.namespace} on ${config.store}`;
  byId("mode").textContent = config.read_only ? "read-only" : "";

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (key === "class") node.className = value;
      else if (key === "title") node.title = value;
      else node.setAttribute(key, value);
    }
    for (const child of children) {
      if (child === null || child === undefined || child === "") continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function duration(ms) {
    const s = Math.max(0, ms) / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    const m = Math.floor(s / 60), h = Math.floor(m / 60), d = Math.floor(h / 24);
    if (m < 60) return `${m} m ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
    if (h < 24) return `${h} h ${String(m % 60).padStart(2, "0")} m`;
    return `${d} d ${h % 24} h`;
  }

  function utc(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace(/\.000Z$/, "Z").replace(/(\.\d+)Z$/, "$1Z");
  }

  function badge(text, kind) {
    return el("span", { class: `badge s-${kind || text}` }, text);
  }

  // A countdown to store time `target`, given the store's `now` when the state was read: remaining time
  // counts down on this browser's monotonic clock, so its wall clock never matters.
  // With `every` (an interval job's period), a countdown that runs out starts over, as the job's next
  // slot moves on by one period, and its time below follows.
  function countdown(remainingMs, done, prefix, every, slot, below) {
    const node = el("span", { class: "countdown" });
    countdowns.push({ node, at: fetchedAt + remainingMs, done, prefix: prefix || "", every, slot, below });
    return node;
  }

  function tick() {
    const now = performance.now();
    for (const c of countdowns) {
      let left = c.at - now;
      if (left <= 0 && c.every) {
        const periods = Math.floor(-left / c.every) + 1;
        c.at += periods * c.every;
        c.slot += periods * c.every;
        left = c.at - now;
        if (c.below) c.below.textContent = utc(c.slot);
      }
      c.node.textContent = left > 0 ? c.prefix + duration(left) : c.done;
      if (left <= 0 && !c.elapsed) {
        c.elapsed = true;
        elapsed = true;
      }
    }
    // A lease that ran out, or a slot that came due, since the last read: read again rather than wait
    // for the next poll (its holder has most likely renewed it); at most once a second.
    if (elapsed && now - lastEarly >= 1000) {
      elapsed = false;
      lastEarly = now;
      refresh(false);
    }
    if (fetchedAt) byId("updated").textContent = `updated ${duration(now - fetchedAt)} ago`;
  }

  // The job whose own page is shown (location.hash "#job=NAME"), or null for the list.
  let currentJob = null;
  let lastState = null;

  function jobLink(name, inner) {
    return el("a", { href: `#job=${encodeURIComponent(name)}`, class: "job-link" }, inner || name);
  }

  function route() {
    const hash = location.hash;
    currentJob = hash.startsWith("#job=") ? decodeURIComponent(hash.slice(5)) : null;
    byId("list-view").hidden = currentJob !== null;
    byId("job-view").hidden = currentJob === null;
  }

  function stateCell(job) {
    const cell = el("td");
    if (job.paused) cell.append(badge("paused"), " ");
    const record = job.record;
    if (record && record.status === "running" && !record.live) cell.append(badge("lease expired", "failed"));
    else if (record) cell.append(badge(record.status));
    else cell.append(badge("never run", "none"));
    if (job.trigger && job.trigger.live) cell.append(" ", badge("trigger running", "running"));
    else if (job.pending_trigger) cell.append(" ", badge("trigger pending", "pending"));
    if (job.missed) cell.append(" ", badge(`${job.missed} missed`, "missed"));
    return cell;
  }

  function holderCell(job) {
    const cell = el("td", { class: "mono" });
    const record = job.record;
    if (record && record.live) cell.append(record.holder);
    if (job.trigger && job.trigger.live) cell.append(el("span", { class: "sub" }, `trigger: ${job.trigger.holder}`));
    if (!cell.childNodes.length) cell.append("—");
    return cell;
  }

  function leaseCell(job) {
    const cell = el("td", { class: "num" });
    const record = job.record;
    if (record && record.live) cell.append(countdown(record.expires_in_ms, "0.0 s"));
    if (job.trigger && job.trigger.live) {
      cell.append(el("span", { class: "sub" }, "trigger: ", countdown(job.trigger.expires_in_ms, "0.0 s")));
    }
    if (!cell.childNodes.length) cell.append("—");
    return cell;
  }

  function actionsCell(job, canControl) {
    const cell = el("td", { class: "actions" });
    if (config.read_only || !canControl) return cell;
    const verbs = [job.paused ? "resume" : "pause", "trigger"];
    for (const verb of verbs) {
      const button = el("button", { type: "button", "data-verb": verb }, verb[0].toUpperCase() + verb.slice(1));
      button.dataset.job = job.job;
      cell.append(button);
    }
    return cell;
  }

  function jobRow(job, canControl) {
    const row = el("tr");
    row.dataset.job = job.job;
    const schedule = el("td", {}, job.schedule ? el("code", {}, job.schedule) : "—");
    const options = Object.entries(job.options || {}).map(([key, value]) => `${key} ${value}`);
    if (options.length) schedule.append(el("span", { class: "sub" }, options.join(" · ")));
    const next = el("td", { class: "num" });
    if (job.paused) next.append("paused");
    else if (job.next_slot !== null && job.next_slot !== undefined) {
      const below = el("span", { class: "sub" }, utc(job.next_slot));
      next.append(countdown(job.next_in_ms, "due now", "in ", job.every_ms, job.next_slot, below), below);
    } else next.append("—");
    const last = el("td", { class: "num" });
    if (job.record) {
      last.append(utc(job.record.slot),
                  el("span", { class: "sub" }, `attempt ${job.record.attempt} · token ${job.record.token}`));
    } else last.append("—");
    if (job.last_success) last.append(el("span", { class: "sub" }, `last success ${utc(job.last_success)}`));
    const replicas = el("td", { class: "mono" });
    for (const name of job.instances) replicas.append(el("span", { class: "sub" }, name));
    if (!job.instances.length) replicas.append("—");
    row.append(el("td", {}, jobLink(job.job, el("strong", {}, job.job))), schedule, next, stateCell(job), holderCell(job),
               leaseCell(job), last, replicas, actionsCell(job, canControl));
    return row;
  }

  function runRow(run, withJob = true) {
    const error = run.error ? el("pre", { class: "err" }, run.error) : "";
    const job = withJob ? [el("td", {}, jobLink(run.job))] : [];
    return el("tr", {},
      el("td", { class: "num" }, utc(run.started_at)),
      ...job,
      el("td", { class: "num" }, utc(run.slot)),
      el("td", { class: "num" }, run.attempt),
      el("td", { class: "mono" }, run.instance),
      el("td", {}, badge(run.outcome)),
      el("td", { class: "num" }, run.duration_ms < 1000 ? `${run.duration_ms} ms` : duration(run.duration_ms)),
      el("td", {}, error));
  }

  function fill(table, rows, columns, empty) {
    const body = table.tBodies[0];
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", { colspan: columns, class: "empty" }, empty))]));
  }

  // The list's filters: a name substring, and which jobs to show.
  function shown(job) {
    const text = byId("filter").value.trim().toLowerCase();
    if (text && !job.job.toLowerCase().includes(text)) return false;
    const last = job.runs.find((run) => run.outcome !== "missed");
    switch (byId("show").value) {
      case "running": return Boolean(job.record && job.record.live);
      case "failed": return Boolean(last && last.outcome === "failed") || Boolean(job.record && job.record.status === "failed");
      case "paused": return job.paused;
      case "never": return !job.record;
      case "missed": return job.missed > 0;
      default: return true;
    }
  }

  function render(state) {
    lastState = state;
    countdowns = [];
    byId("error").hidden = true;
    byId("notes").replaceChildren(...state.notes.map((note) => el("li", {}, note)));
    const canControl = state.capabilities.control;
    const jobs = state.jobs.filter(shown);
    byId("shown").textContent = jobs.length === state.jobs.length ? "" : `${jobs.length} of ${state.jobs.length}`;
    fill(byId("jobs"), jobs.map((job) => jobRow(job, canControl)), 9,
         state.jobs.length ? "no job matches the filter"
           : "no jobs in this namespace yet (a scheduler's namespace is its namespace= option)");
    fill(byId("runs"), state.recent.map((run) => runRow(run)), 8,
         state.capabilities.history ? "no runs recorded yet" : "this store keeps no run history");
    tick();
  }

  function fact(name, ...value) {
    return [el("dt", {}, name), el("dd", {}, ...(value.length ? value : ["—"]))];
  }

  function renderJob(data) {
    countdowns = [];
    byId("error").hidden = true;
    const job = data.job;
    byId("job-name").textContent = job.job;
    const actions = actionsCell(job, data.capabilities.control);
    byId("job-actions").replaceChildren(...actions.childNodes);
    const options = Object.entries(job.options || {}).map(([key, value]) => `${key} ${value}`).join(" · ");
    const record = job.record;
    const span = duration(data.missed_window_ms).replace(/ 0+ [a-z]+$/, "");
    byId("job-facts").replaceChildren(
      ...fact("Schedule", job.schedule ? el("code", {}, job.schedule) : ""),
      ...fact("Options", options),
      ...fact("State", ...stateCell(job).childNodes),
      ...fact("Holder", ...(record && record.live ? [record.holder, " · lease ", countdown(record.expires_in_ms, "0.0 s")] : [])),
      ...fact("Last slot", ...(record ? [utc(record.slot), ` · attempt ${record.attempt} · token ${record.token}`] : [])),
      ...fact("Last success", ...(job.last_success ? [utc(job.last_success)] : [])),
      ...fact(`Missed (last ${span})`, String(job.missed)),
      ...fact("Replicas", job.instances.join(", ")),
      ...fact("Trigger", job.trigger_id ? `${job.pending_trigger ? "pending" : "claimed"} (id ${job.trigger_id})` : ""));
    byId("job-next").replaceChildren(...(job.paused ? [el("li", {}, "paused")]
      : job.next_slots.map((slot) => el("li", {}, utc(slot)))));
    fill(byId("job-runs"), job.runs.map((run) => runRow(run, false)), 7,
         data.capabilities.history ? "no runs recorded yet" : "this store keeps no run history");
    tick();
  }

  function showError(text) {
    const node = byId("error");
    node.textContent = text;
    node.hidden = false;
  }

  // A poll is skipped while one is under way (a slow store); a forced one (after a button) is not, and
  // only the newest answer is shown.
  async function refresh(force) {
    if (busy && !force) return;
    const mine = ++sequence;
    busy = true;
    const job = currentJob;
    try {
      const where = job === null ? "api/state" : `api/job/${encodeURIComponent(job)}`;
      const response = await fetch(where, { cache: "no-store", headers: { accept: "application/json" } });
      const data = await response.json();
      if (mine !== sequence || job !== currentJob) return;
      if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
      fetchedAt = performance.now() - (data.age_ms || 0);
      if (job === null) render(data);
      else renderJob(data);
    } catch (err) {
      if (mine === sequence) showError(`the dashboard cannot be reached: ${err}`);
    } finally {
      if (mine === sequence) busy = false;
    }
  }

  async function control(button) {
    const verb = button.dataset.verb, job = button.dataset.job;
    button.disabled = true;
    try {
      const response = await fetch(`api/${verb}`, {
        method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ job }),
      });
      const data = await response.json();
      if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
      const message = byId("message");
      message.textContent = verb === "trigger" ? `${job}: triggered; one replica runs it within a heartbeat`
        : `${job}: ${verb}d on every replica within a heartbeat`;
      message.hidden = false;
    } catch (err) {
      showError(`${verb} ${job} failed: ${err}`);
    } finally {
      button.disabled = false;
      await refresh(true);
    }
  }

  for (const id of ["jobs", "job-actions"]) {
    byId(id).addEventListener("click", (event) => {
      const button = event.target.closest("button[data-verb]");
      if (button) control(button);
    });
  }
  for (const id of ["filter", "show"]) byId(id).addEventListener("input", () => { if (lastState) render(lastState); });
  window.addEventListener("hashchange", () => { route(); refresh(true); });
  route();
  refresh(false);
  setInterval(() => refresh(false), config.refresh_ms);
  setInterval(tick, 100);
})();
