// The anarchon dashboard: polls api/state (or a job's or the schedules' endpoint) and renders it. Store
// text only ever becomes text nodes or form values (textContent, value, never innerHTML), so a job name,
// a schedule's arguments or an error message cannot inject markup.
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

  function badge(text, kind, title) {
    const node = el("span", { class: `badge s-${kind || text}` }, text);
    if (title) node.title = title;
    return node;
  }

  // A duration in ms as the core reads it back: "10s", "1h", "90m", "250ms".
  function msText(ms) {
    for (const [unit, size] of [["d", 86_400_000], ["h", 3_600_000], ["m", 60_000], ["s", 1000]]) {
      if (ms > 0 && ms % size === 0) return `${ms / size}${unit}`;
    }
    return `${ms}ms`;
  }

  // A stored option as a person writes it: "600000ms" becomes "10m", true "on" and false "off".
  function optionText(value) {
    if (typeof value === "boolean") return value ? "on" : "off";
    const found = /^(\d+)ms$/.exec(String(value));
    return found ? msText(Number(found[1])) : String(value);
  }

  function orphanBadge(task) {
    return badge("no live replica", "missed",
                 `no live replica has registered task ${task}: nobody claims its slots until one is up`);
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

  // The job whose own page is shown (location.hash "#job=NAME"), or null; the view shown: "jobs" (the
  // list), "job" (a job's own page) or "schedules" (location.hash "#schedules").
  let currentJob = null;
  let currentView = "jobs";
  let lastState = null;
  let lastSchedules = null;
  // The schedules' page: its filters as last read, the cursor it starts after, and its number.
  let scheduleAfter = "";
  let schedulePage = 1;

  function jobLink(name, inner) {
    return el("a", { href: `#job=${encodeURIComponent(name)}`, class: "job-link" }, inner || name);
  }

  function route() {
    const hash = location.hash;
    currentJob = hash.startsWith("#job=") ? decodeURIComponent(hash.slice(5)) : null;
    currentView = currentJob !== null ? "job" : hash === "#schedules" ? "schedules" : "jobs";
    byId("list-view").hidden = currentView !== "jobs";
    byId("job-view").hidden = currentView !== "job";
    byId("schedules-view").hidden = currentView !== "schedules";
    byId("tab-jobs").classList.toggle("current", currentView !== "schedules");
    byId("tab-schedules").classList.toggle("current", currentView === "schedules");
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
    if (job.stored && job.task_live === false) cell.append(" ", orphanBadge(job.stored.task));
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

  function capital(word) {
    return word[0].toUpperCase() + word.slice(1);
  }

  function controlButton(verb, job) {
    const button = el("button", { type: "button", "data-verb": verb }, capital(verb));
    button.dataset.job = job;
    return button;
  }

  // A stored schedule's own buttons: edit, pause and resume (its `paused` flag), delete.
  function scheduleButton(verb, schedule, label) {
    const button = el("button", { type: "button", "data-schedule-verb": verb }, label || capital(verb));
    button.dataset.schedule = schedule.id;
    button.dataset.version = String(schedule.version);
    return button;
  }

  function actionsCell(job, canControl) {
    const cell = el("td", { class: "actions" });
    if (config.read_only) return cell;
    if (job.stored) {
      // A stored schedule pauses by its own flag; a pause set by `anarchon pause` is lifted as a control.
      if (job.control_paused && canControl) cell.append(controlButton("resume", job.job));
      else cell.append(scheduleButton(job.stored.paused ? "resume" : "pause", job.stored));
      if (canControl) cell.append(controlButton("trigger", job.job));
      cell.append(scheduleButton("edit", job.stored));
      return cell;
    }
    if (!canControl) return cell;
    for (const verb of [job.paused ? "resume" : "pause", "trigger"]) cell.append(controlButton(verb, job.job));
    return cell;
  }

  function jobRow(job, canControl) {
    const row = el("tr");
    row.dataset.job = job.job;
    const schedule = el("td", {}, job.schedule ? el("code", {}, job.schedule) : "—");
    if (job.stored) schedule.append(el("span", { class: "sub" }, `stored · task ${job.stored.task}`));
    const options = Object.entries(job.options || {}).map(([key, value]) => `${key} ${optionText(value)}`);
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
    const options = Object.entries(job.options || {}).map(([key, value]) => `${key} ${optionText(value)}`)
      .join(" · ");
    const record = job.record;
    const span = duration(data.missed_window_ms).replace(/ 0+ [a-z]+$/, "");
    const stored = job.stored;
    const storedFacts = stored ? [
      ...fact("Task", el("code", {}, stored.task), ...(job.task_live === false ? [" ", orphanBadge(stored.task)] : [])),
      ...fact("Arguments", el("code", {}, JSON.stringify(stored.args))),
      ...fact("Version", `${stored.version} · stored schedule, updated ${utc(Date.parse(stored.updated_at))}`),
    ] : [];
    byId("job-facts").replaceChildren(
      ...fact("Schedule", job.schedule ? el("code", {}, job.schedule) : ""),
      ...storedFacts,
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

  // -- stored schedules ----------------------------------------------------------------------------

  function scheduleRow(schedule, canWrite) {
    const row = el("tr");
    row.dataset.schedule = schedule.id;
    const task = el("td", {}, el("code", {}, schedule.task));
    if (schedule.task_live === false) task.append(" ", orphanBadge(schedule.task));
    else if (schedule.replicas.length) task.append(el("span", { class: "sub" }, schedule.replicas.join(", ")));
    const when = el("td", {}, el("code", {}, schedule.schedule));
    const options = Object.entries(schedule.options).map(([key, value]) => `${key} ${optionText(value)}`);
    if (options.length) when.append(el("span", { class: "sub" }, options.join(" · ")));
    const next = el("td", { class: "num" });
    if (schedule.paused) next.append("paused");
    else if (schedule.next_slot !== null) {
      const below = el("span", { class: "sub" }, utc(schedule.next_slot));
      next.append(countdown(schedule.next_in_ms, "due now", "in ", schedule.every_ms, schedule.next_slot, below), below);
    } else next.append("no slot left");
    const version = el("td", { class: "num" }, String(schedule.version),
                       el("span", { class: "sub" }, `updated ${utc(Date.parse(schedule.updated_at))}`));
    const actions = el("td", { class: "actions" });
    if (canWrite) {
      actions.append(scheduleButton("edit", schedule),
                     scheduleButton(schedule.paused ? "resume" : "pause", schedule),
                     scheduleButton("remove", schedule, "Delete"));
    }
    row.append(el("td", {}, jobLink(schedule.id, el("strong", {}, schedule.id))), task, when,
               el("td", {}, el("code", { class: "args" }, JSON.stringify(schedule.args))), next,
               el("td", {}, schedule.paused ? badge("paused") : badge("active", "done")), version, actions);
    return row;
  }

  function scheduleQuery() {
    const query = new URLSearchParams();
    const task = byId("schedule-task").value.trim(), prefix = byId("schedule-prefix").value;
    if (task) query.set("task", task);
    if (prefix) query.set("prefix", prefix);
    if (scheduleAfter) query.set("after", scheduleAfter);
    return query.toString();
  }

  function renderSchedules(data) {
    lastSchedules = data;
    countdowns = [];
    byId("error").hidden = true;
    const note = byId("schedules-note");
    note.textContent = data.note || "";
    note.hidden = !data.note;
    const canWrite = !config.read_only && data.capabilities.schedules;
    if (byId("schedule-new")) byId("schedule-new").hidden = !canWrite;
    const tasks = byId("schedule-tasks");
    if (tasks) tasks.replaceChildren(...data.tasks.map((task) => el("option", { value: task })));
    const filtered = byId("schedule-task").value.trim() || byId("schedule-prefix").value;
    fill(byId("schedules"), data.items.map((schedule) => scheduleRow(schedule, canWrite)), 8,
         filtered || scheduleAfter ? "no schedule matches"
           : `no schedules in this namespace yet${canWrite ? ": New schedule adds one" : ""}`);
    byId("schedules-more").hidden = !data.cursor;
    byId("schedules-first").hidden = !scheduleAfter;
    byId("schedules-shown").textContent = data.cursor || scheduleAfter ? `page ${schedulePage}` : "";
    tick();
  }

  // The form: create a schedule, or edit one (prefilled, with the version it was read at).
  const form = byId("schedule-form");
  const field = (name) => form.elements.namedItem(name);

  function localInput(ms) {
    const d = new Date(ms), pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:` +
           `${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function showKind() {
    for (const node of form.querySelectorAll("[data-kind]")) node.hidden = node.dataset.kind !== field("kind").value;
  }

  function formError(text) {
    const node = byId("schedule-error");
    node.textContent = text || "";
    node.hidden = !text;
  }

  function openForm(schedule) {
    form.reset();
    formError("");
    const editing = Boolean(schedule);
    form.dataset.editing = editing ? schedule.id : "";
    byId("schedule-form-title").textContent = editing ? `Edit ${schedule.id} (version ${schedule.version})`
      : "New schedule";
    byId("schedule-save").textContent = editing ? "Save" : "Create";
    field("id").readOnly = editing;
    byId("schedule-replace").hidden = editing;
    const other = byId("schedule-other");
    other.hidden = true;
    if (editing) {
      const options = schedule.options;
      field("id").value = schedule.id;
      field("task").value = schedule.task;
      field("kind").value = schedule.kind;
      if (schedule.kind === "every") {
        field("every").value = msText(schedule.every);
        field("offset").value = schedule.offset ? msText(schedule.offset) : "";
      } else if (schedule.kind === "cron") {
        field("cron").value = schedule.cron;
        field("timezone").value = schedule.timezone;
        field("dst_gap").value = schedule.dst_gap;
        field("dst_fold").value = schedule.dst_fold;
      } else field("at").value = localInput(schedule.at);
      field("args").value = JSON.stringify(schedule.args, null, 1);
      field("timeout").value = options.timeout === undefined ? "" : optionText(options.timeout);
      field("overlap").value = options.overlap || "";
      field("retry").value = options.retry === undefined ? "" : optionText(options.retry);
      field("paused").checked = schedule.paused;
      field("version").value = String(schedule.version);
      const kept = Object.entries(options).filter(([key]) => !["timeout", "overlap", "retry"].includes(key))
        .map(([key, value]) => `${key} ${optionText(value)}`);
      other.textContent = kept.length ? `Kept as they are: ${kept.join(" · ")}` : "";
      other.hidden = !kept.length;
    }
    showKind();
    form.hidden = false;
    (editing ? field("task") : field("id")).focus();
  }

  function closeForm() {
    form.hidden = true;
    form.dataset.editing = "";
    formError("");
  }

  // What the form asks for, as api/schedules/add or update takes it. The server checks every value and
  // answers one message that says what is wrong; the page only gathers.
  function formBody(editing) {
    const value = (name) => field(name).value.trim();
    const body = { id: editing || value("id"), task: value("task") };
    const kind = value("kind");
    if (kind === "every") {
      body.every = value("every");
      if (value("offset")) body.offset = value("offset");
    } else if (kind === "cron") {
      Object.assign(body, { cron: value("cron"), timezone: value("timezone") || "UTC", dst_gap: value("dst_gap"),
                            dst_fold: value("dst_fold") });
    } else {
      const at = value("at"), moment = new Date(at);
      body.at = at && !Number.isNaN(moment.getTime()) ? moment.toISOString() : at;
    }
    body.args = field("args").value.trim() || "{}";
    body.options = {};
    for (const name of ["timeout", "overlap", "retry"]) {
      if (value(name)) body.options[name] = value(name);
      else if (editing) body.options[name] = null;  // an emptied field removes the option
    }
    body.paused = field("paused").checked;
    if (editing) body.version = Number(field("version").value);
    else body.replace = field("replace").checked;
    return body;
  }

  async function post(where, body) {
    const response = await fetch(where, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    return [response, await response.json()];
  }

  function say(text) {
    const message = byId("message");
    message.textContent = text;
    message.hidden = false;
  }

  async function submitForm(event) {
    event.preventDefault();
    const editing = form.dataset.editing;
    const save = byId("schedule-save");
    save.disabled = true;
    try {
      const [response, data] = await post(`api/schedules/${editing ? "update" : "add"}`, formBody(editing));
      if (!response.ok) {
        let text = data.error || `HTTP ${response.status}`;
        if (response.status === 409 && editing && data.current) {
          // Stale: keep what was typed, and hold the version now stored, so that a second Save is a
          // deliberate overwrite of the other change.
          field("version").value = String(data.current.version);
          byId("schedule-form-title").textContent = `Edit ${editing} (version ${data.current.version})`;
          text += `. It is now: ${data.current.schedule}, task ${data.current.task}. Save again to write this ` +
                  "form over it, or Cancel.";
        }
        formError(text);
        return;
      }
      const schedule = data.schedule;
      closeForm();
      say(`${schedule.id}: ${editing ? "saved" : "created"}, version ${schedule.version}; every replica ` +
          `with task ${schedule.task} sees it within a heartbeat${data.warning ? `. Note: ${data.warning}` : ""}`);
    } catch (err) {
      formError(`the dashboard cannot be reached: ${err}`);
    } finally {
      save.disabled = false;
      await refresh(true);
    }
  }

  async function openEdit(id) {
    const response = await fetch(`api/schedule/${encodeURIComponent(id)}`, { cache: "no-store" });
    const data = await response.json();
    if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
    if (location.hash !== "#schedules") location.hash = "#schedules";
    openForm(data.schedule);
  }

  async function scheduleAction(button) {
    const verb = button.dataset.scheduleVerb, id = button.dataset.schedule;
    if (verb === "edit") { await openEdit(id); return; }
    const version = Number(button.dataset.version);
    if (verb === "remove" && !window.confirm(`Delete schedule ${id}? No replica claims its slots afterwards; ` +
                                             "its history stays until anarchon forget.")) return;
    button.disabled = true;
    try {
      const [response, data] = await post(`api/schedules/${verb}`, verb === "remove" ? { id, version } : { id });
      if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
      if (verb === "remove") {
        if (form && form.dataset.editing === id) closeForm();
        say(`${id}: deleted (it was at version ${data.removed.version})`);
      } else {
        say(`${id}: ${verb}d on every replica within a heartbeat (version ${data.schedule.version})`);
      }
    } catch (err) {
      showError(`${verb} ${id} failed: ${err}`);
    } finally {
      button.disabled = false;
      await refresh(true);
    }
  }

  function showError(text) {
    const node = byId("error");
    node.textContent = text;
    node.hidden = false;
  }

  // A poll is skipped while one is under way (a slow store); a forced one (after a button) is not, and
  // only the newest answer for the view still shown is drawn.
  async function refresh(force) {
    if (busy && !force) return;
    const mine = ++sequence;
    busy = true;
    const view = currentView, job = currentJob;
    try {
      const where = view === "job" ? `api/job/${encodeURIComponent(job)}`
        : view === "schedules" ? `api/schedules?${scheduleQuery()}` : "api/state";
      const response = await fetch(where, { cache: "no-store", headers: { accept: "application/json" } });
      const data = await response.json();
      if (mine !== sequence || view !== currentView || job !== currentJob) return;
      if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
      fetchedAt = performance.now() - (data.age_ms || 0);
      if (view === "jobs") render(data);
      else if (view === "job") renderJob(data);
      else renderSchedules(data);
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
      const [response, data] = await post(`api/${verb}`, { job });
      if (!response.ok) { showError(data.error || `HTTP ${response.status}`); return; }
      say(verb === "trigger" ? `${job}: triggered; one replica runs it within a heartbeat`
        : `${job}: ${verb}d on every replica within a heartbeat`);
    } catch (err) {
      showError(`${verb} ${job} failed: ${err}`);
    } finally {
      button.disabled = false;
      await refresh(true);
    }
  }

  for (const id of ["jobs", "job-actions", "schedules"]) {
    byId(id).addEventListener("click", (event) => {
      const button = event.target.closest("button[data-verb]");
      if (button) control(button);
      const scheduleButton = event.target.closest("button[data-schedule-verb]");
      if (scheduleButton) scheduleAction(scheduleButton);
    });
  }
  for (const id of ["filter", "show"]) byId(id).addEventListener("input", () => { if (lastState) render(lastState); });
  // The schedules' filters are read by the store: a new one reads the first page again, once typing stops.
  let typing = 0;
  for (const id of ["schedule-task", "schedule-prefix"]) {
    byId(id).addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { scheduleAfter = ""; schedulePage = 1; refresh(true); }, 250);
    });
  }
  byId("schedules-more").addEventListener("click", (event) => {
    event.preventDefault();
    if (!lastSchedules || !lastSchedules.cursor) return;
    scheduleAfter = lastSchedules.cursor;
    schedulePage += 1;
    refresh(true);
  });
  byId("schedules-first").addEventListener("click", (event) => {
    event.preventDefault();
    scheduleAfter = "";
    schedulePage = 1;
    refresh(true);
  });
  if (form) {  // (a read-only page has no form)
    byId("schedule-new").addEventListener("click", () => openForm(null));
    byId("schedule-cancel").addEventListener("click", closeForm);
    field("kind").addEventListener("change", showKind);
    form.addEventListener("submit", submitForm);
    if (Intl.supportedValuesOf) {
      const zones = ["UTC", ...Intl.supportedValuesOf("timeZone").filter((zone) => zone !== "UTC")];
      byId("schedule-zones").replaceChildren(...zones.map((zone) => el("option", { value: zone })));
    }
  }
  window.addEventListener("hashchange", () => { route(); refresh(true); });
  route();
  refresh(false);
  setInterval(() => refresh(false), config.refresh_ms);
  setInterval(tick, 100);
})();
