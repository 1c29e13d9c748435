// Schedules: the table with toggle and "run now", details with history, create/edit forms.
import { J, api, get, may, query } from "./api.js";
import { attempt, badge, fill, h, notice, table, when } from "./dom.js";
import { commandsLink } from "./commands.js";
import { latestChanges } from "./audit.js";

const HISTORY_PAGE = 20;

export function describeRecurrence(recurrence, timezone) {
  const zone = timezone && timezone !== "UTC" ? ` (${timezone})` : "";
  switch (recurrence.kind) {
    case "cron": return `cron ${recurrence.expression}${zone}`;
    case "rrule": return `${recurrence.rule}${zone}`;
    case "interval": {
      const parts = ["days", "hours", "minutes", "seconds"]
        .filter((unit) => recurrence[unit]).map((unit) => `${recurrence[unit]} ${unit}`);
      return `every ${parts.join(" ")}`;
    }
    default: return "when triggered";
  }
}

export function describeTarget(definition) {
  const targets = definition.targets || {};
  const parts = [targets.object_type || "host"];
  if (targets.object_ids) parts.push(`${targets.object_ids.length} ids`);
  if (targets.filter) parts.push(`where ${JSON.stringify(targets.filter)}`);
  if (definition.trigger) parts.push(`on ${definition.trigger.run_on} ${definition.trigger.operation}`);
  return parts.join(" ");
}

/** Re-reads `path` until `shows(answer)` (the projection caught up) or 10 s have passed. */
async function settle(path, shows) {
  const until = Date.now() + 10000;
  while (Date.now() < until) {
    try { if (shows(await get(path))) return true; } catch { /* not projected yet */ }
    await new Promise((resolve) => setTimeout(resolve, 400));
  }
  return false;
}

export async function schedulesView({ main, session }) {
  const list = await get(`${J}?limit=500`);
  const admin = may(session.role, "SECURITY_ADMIN");
  const result = h("div", { id: "action-result" });
  const rerender = () => schedulesView({ main, session });
  const rows = list.data.map((job) => {
    const path = `${J}/${encodeURIComponent(job.name)}`;
    const cells = [
      h("a", { href: `#/schedules/${encodeURIComponent(job.name)}` }, job.name),
      describeRecurrence(job.definition.recurrence, job.definition.timezone),
      describeTarget(job.definition), badge(job.status), when(job.last_fired_at),
      job.enabled && !job.paused ? when(job.next_fire_at) : when(null)];
    if (admin) {
      const toggle = h("input", { type: "checkbox", className: "toggle", checked: job.enabled,
        title: job.enabled ? "Disable" : "Enable", "data-name": job.name });
      toggle.addEventListener("change", async () => {
        toggle.disabled = true;
        const verb = job.enabled ? "disable" : "enable";
        const done = await attempt(result, () => api("POST", `${path}/${verb}`),
          `${job.name}: ${verb} requested.`);
        if (done) await settle(path, (now) => now.enabled !== job.enabled);
        rerender();
      });
      cells.push(h("label", {}, toggle, job.enabled ? " on" : " off"),
        h("span", {},
          h("button", { className: "secondary run-now", "data-name": job.name, onclick: () =>
            attempt(result, () => api("POST", `${path}/trigger`), `${job.name}: run requested.`) },
          "Run now"), " ",
          h("a", { href: `#/schedules/${encodeURIComponent(job.name)}/edit` }, "Edit")));
    }
    return cells;
  });
  const headers = ["name", "recurrence", "target", "status", "last run", "next run"];
  if (admin) headers.push("enabled", "");
  fill(main,
    h("h1", {}, `Schedules (${list.count})`),
    admin ? h("div", { className: "actions" },
      h("a", { href: "#/schedules/new", id: "new-schedule" }, h("button", {}, "New schedule")))
      : null,
    result, h("div", { id: "schedules" }, table(headers, rows, "No schedule yet.")));
}

export async function scheduleView({ main, session, args: [name] }) {
  const path = `${J}/${encodeURIComponent(name)}`;
  const [job, changes] = await Promise.all([get(path),
    latestChanges(session, name).catch(() => null)]);
  const runs = h("div", { id: "runs" });
  async function showRuns(offset) {
    const page = await get(`${path}/history${query({ limit: HISTORY_PAGE, offset })}`);
    const stats = page.stats;
    const rate = stats.success_rate === null ? "—" : `${Math.round(stats.success_rate * 100)}%`;
    runs.replaceChildren(
      h("p", {}, `${stats.total} runs: ${stats.succeeded} succeeded, `,
        `${stats.partially_failed} partially failed, ${stats.failed} failed, `,
        `${stats.fired} in flight, ${stats.skipped} skipped; success rate ${rate}.`),
      table(["occurrence", "fired", "reason", "outcome", "hosts", "commands", "error"],
        page.data.map((run) => [commandsLink({ schedule: name, run: run.occurrence },
          when(run.occurrence)), when(run.fired_at), run.reason,
          badge(run.outcome), run.hosts_matched, run.commands_issued, run.error || ""]),
        "No run yet."),
      h("div", { className: "actions" },
        offset > 0 ? h("button", { className: "secondary",
          onclick: () => showRuns(Math.max(0, offset - HISTORY_PAGE)) }, "← Newer") : null,
        h("span", { className: "muted" },
          `${page.count ? offset + 1 : 0}–${offset + page.data.length} of ${page.count}`),
        offset + HISTORY_PAGE < page.count ? h("button", { className: "secondary",
          onclick: () => showRuns(offset + HISTORY_PAGE) }, "Older →") : null));
  }
  await showRuns(0);
  const result = h("div", { id: "action-result" });
  const verb = job.enabled ? "disable" : "enable";
  fill(main,
    h("h1", {}, `Schedule ${job.name} `, badge(job.status)),
    may(session.role, "SECURITY_ADMIN") ? h("div", { className: "actions" },
      h("button", { className: "secondary", id: "toggle-schedule", onclick: async () => {
        const done = await attempt(result, () => api("POST", `${path}/${verb}`),
          `${verb} requested.`);
        if (done) await settle(path, (now) => now.enabled !== job.enabled);
        scheduleView({ main, session, args: [name] });
      } }, job.enabled ? "Disable" : "Enable"),
      h("button", { className: "secondary", id: "run-now", onclick: () => attempt(result,
        () => api("POST", `${path}/trigger`), "Run requested.") }, "Run now"),
      h("a", { href: `#/schedules/${encodeURIComponent(name)}/edit` }, "Edit")) : null,
    result,
    table(["", ""], [
      ["recurrence", describeRecurrence(job.definition.recurrence, job.definition.timezone)],
      ["target", describeTarget(job.definition)], ["scanner", job.definition.scanner],
      ["last run", when(job.last_fired_at)], ["last success", when(job.last_success_at)],
      ["runs", `${job.runs} (${job.skipped_runs} skipped, ${job.failed_runs} failed)`],
      ["disabled because", job.disabled_reason || "—"], ["pause note", job.pause_note || "—"],
      ["created by", job.created_by || "—"], ["last changed by", job.updated_by || "—"]]),
    h("h2", {}, "Next fire times"),
    job.next_fire_times.length
      ? h("ol", { id: "next-fire-times" }, job.next_fire_times.map((at) => h("li", {}, when(at))))
      : h("p", { className: "muted" }, "None while disabled or paused."),
    h("h2", {}, "Run history"),
    commandsLink({ schedule: name }, "All commands of this schedule →"), runs,
    h("h2", {}, "Definition"), h("pre", {}, JSON.stringify(job.definition, null, 2)), changes);
}

// --- the create/edit form -------------------------------------------------------------

const FIELD_OF = [
  ["recurrence", "recurrence"], ["targets", "filter"], ["trigger", "trigger"],
  ["timezone", "timezone"], ["priority", "priority"], ["scanner", "scanner"],
  ["description", "description"], ["name", "name"],
];

/** The form field an API error names (`recurrence.cron.expression` → recurrence). */
export function formFieldOf(apiField) {
  for (const [prefix, field] of FIELD_OF) {
    if (apiField === prefix || apiField.startsWith(`${prefix}.`)) return field;
  }
  return null;
}

function field(label, name, input, hint) {
  return h("label", { className: "wide", id: `field-${name}` }, label, input,
    hint ? h("span", { className: "muted" }, hint) : null,
    h("span", { className: "field-error", id: `error-${name}` }));
}

export async function scheduleFormView({ main, session, args: [name] }) {
  if (!may(session.role, "SECURITY_ADMIN")) {
    fill(main, notice("Creating and editing schedules needs SECURITY_ADMIN.", true));
    return;
  }
  const existing = name ? await get(`${J}/${encodeURIComponent(name)}`) : null;
  const d = existing ? existing.definition : { recurrence: { kind: "cron", expression: "" },
    timezone: "UTC", priority: 5, targets: {} };
  const r = d.recurrence;
  const input = (attrs) => h("input", attrs);
  const kind = h("select", { name: "kind" }, ["cron", "interval", "rrule", "none"].map(
    (value) => h("option", { value, selected: r.kind === value }, value)));
  const expression = input({ name: "expression", value: r.expression || "",
    placeholder: "0 3 * * 1-5" });
  const rule = input({ name: "rule", value: r.rule || "",
    placeholder: "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1" });
  const units = ["days", "hours", "minutes", "seconds"].map((unit) =>
    h("span", {}, input({ name: unit, type: "number", min: 0, value: r[unit] || 0, size: 5 }),
      ` ${unit} `));
  const parts = { cron: expression, rrule: rule, interval: h("span", {}, units) };
  const recurrence = h("span", {});
  const showKind = () => recurrence.replaceChildren(parts[kind.value] || "on trigger only");
  kind.addEventListener("change", showKind);
  showKind();
  const filter = h("textarea", { name: "filter", rows: 4,
    placeholder: '{"field": "labels.env", "op": "eq", "value": "prod"}' });
  filter.value = d.targets && d.targets.filter ? JSON.stringify(d.targets.filter, null, 1) : "";
  const trigger = h("select", { name: "trigger" }, ["", "created", "updated", "deleted"].map(
    (value) => h("option", { value, selected: (d.trigger ? d.trigger.operation : "") === value },
      value ? `when a host is ${value}` : "no trigger")));
  const formError = h("div", { id: "form-error" });
  const form = h("form", { className: "edit", id: "schedule-form", novalidate: true },
    h("h1", { className: "wide" }, existing ? `Edit schedule ${name}` : "New schedule"),
    field("Name", "name", input({ name: "name", value: name || "", disabled: Boolean(existing),
      required: true }), existing ? "A schedule's name is its id." : null),
    field("Scanner", "scanner", input({ name: "scanner", value: d.scanner || "", required: true })),
    field("Description", "description", input({ name: "description", value: d.description || "" })),
    field("Recurrence", "recurrence", h("span", {}, kind, " ", recurrence)),
    field("Timezone", "timezone", input({ name: "timezone", value: d.timezone || "UTC" })),
    field("Priority (1–10)", "priority", input({ name: "priority", type: "number", min: 1, max: 10,
      value: d.priority ?? 5 })),
    field("Target filter (JSON, optional)", "filter", filter, "Hosts only; empty = every host."),
    field("Trigger", "trigger", trigger),
    formError,
    h("button", { type: "submit", id: "save-schedule" }, existing ? "Save" : "Create"));

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const slot of form.querySelectorAll(".field-error")) slot.textContent = "";
    for (const bad of form.querySelectorAll(".invalid")) bad.classList.remove("invalid");
    formError.replaceChildren();
    const showError = (where, message) => {
      const slot = form.querySelector(`#error-${where}`);
      if (!slot) { formError.append(notice(message, true)); return; }
      slot.textContent = slot.textContent ? `${slot.textContent}; ${message}` : message;
      for (const control of form.querySelectorAll(`#field-${where} input,`
        + ` #field-${where} textarea, #field-${where} select`)) {
        control.classList.add("invalid");
      }
    };
    const values = Object.fromEntries(new FormData(form));
    const body = {
      scanner: values.scanner, description: values.description, timezone: values.timezone,
      priority: Number(values.priority),
      trigger: values.trigger ? { run_on: "host", operation: values.trigger } : null,
    };
    if (kind.value === "cron") body.recurrence = { kind: "cron", expression: values.expression };
    else if (kind.value === "rrule") body.recurrence = { kind: "rrule", rule: values.rule };
    else if (kind.value === "none") body.recurrence = { kind: "none" };
    else {
      body.recurrence = { kind: "interval" };
      for (const unit of ["days", "hours", "minutes", "seconds"]) {
        body.recurrence[unit] = Number(values[unit] || 0);
      }
    }
    const targets = { ...(d.targets || {}) };
    delete targets.filter;
    if (values.filter.trim()) {
      try { targets.filter = JSON.parse(values.filter); } catch (error) {
        showError("filter", `not JSON: ${error.message}`);
        return;
      }
    }
    body.targets = targets;
    const target = existing ? name : values.name;
    try {
      if (existing) await api("PATCH", `${J}/${encodeURIComponent(name)}`, body);
      else await api("POST", J, { name: values.name, ...body });
    } catch (error) {
      if (!error.errors.length) showError("form", `${error.status} ${error.message}`);
      for (const item of error.errors) {
        showError(formFieldOf(item.field) || "form", `${item.message}`);
      }
      if (error.status !== 422 && error.errors.length) showError("form", error.message);
      return;
    }
    formError.replaceChildren(notice("Accepted; waiting for it to show…"));
    await settle(`${J}/${encodeURIComponent(target)}`,
      (now) => !existing || now.version > existing.version);
    location.hash = `#/schedules/${encodeURIComponent(target)}`;
  });
  fill(main, form);
}
