// Commands across the fleet: filtered, newest issued first, each with its lifecycle.
import { P, get, query } from "./api.js";
import { fill, h, notice, table, when } from "./dom.js";

const FILTERS = ["host", "scanner", "schedule", "run", "organization", "reason", "state",
  "issued_from", "issued_until"];
const REASONS = ["", "scheduled", "retry", "force", "schedule", "trigger", "unknown"];
const STATES = ["", "in_flight", "succeeded", "failed", "timed_out"];

/** The link to the commands page with `filters` set. */
export function commandsLink(filters, text) {
  return h("a", { href: `#/commands${query(filters)}`, className: "commands-link" }, text);
}

const instant = (value) => `${new Date(value).toISOString().replace("T", " ").slice(0, 19)}Z`;

function ended(command) {
  if (!command.outcome_at) return h("span", { className: "muted" }, `deadline `, when(command.deadline));
  const how = command.command_state === "timed_out" ? "deadline passed" : "result";
  return h("span", {}, `${how} `, when(command.outcome_at));
}

export async function commandsView({ main, params }) {
  const filters = Object.fromEntries(FILTERS.map((name) => [name, params.get(name) || ""]));
  const cursor = params.get("cursor") || "";
  const input = (name, label, placeholder) => h("label", {}, label,
    h("input", { name, value: filters[name], placeholder }));
  const choice = (name, label, options) => h("label", {}, label, h("select", { name },
    options.map((value) => h("option", { value, selected: filters[name] === value },
      value ? value.replace("_", " ") : "any"))));
  const form = h("form", { className: "filters", id: "command-filters" },
    input("host", "Host"), input("scanner", "Scanner"), input("schedule", "Schedule"),
    input("run", "Run (occurrence)", "2030-01-01T02:00:00Z"),
    input("organization", "Organization"), choice("reason", "Reason", REASONS),
    choice("state", "State", STATES),
    input("issued_from", "Issued from", "2030-01-01T00:00:00Z"),
    input("issued_until", "Issued until", "2030-01-02T00:00:00Z"),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    location.hash = `#/commands${query(Object.fromEntries(new FormData(form)))}`;
  });
  let page;
  try {
    page = await get(`${P}/commands${query({ ...filters, cursor, limit: 50 })}`);
  } catch (error) {
    // A filter the API refuses (422 names it): keep the form so it can be corrected.
    const fields = error.errors.map((item) => item.field).join(", ");
    fill(main, h("h1", {}, "Commands"), form,
      notice(`${error.status || ""} ${error.message}${fields ? ` (${fields})` : ""}`, true));
    return;
  }
  const next = page.next_cursor
    ? h("a", { id: "next-commands", href: `#/commands${query({ ...filters, cursor: page.next_cursor })}` },
      "Next page →")
    : null;
  fill(main,
    h("h1", {}, `Commands (${page.count})`), form,
    table(["issued", "host", "scanner", "reason", "schedule / run", "state", "ended", "command"],
      page.data.map((command) => [
        when(command.issued_at),
        h("a", { href: `#/hosts/${encodeURIComponent(command.host_id)}` }, command.host_id),
        command.scanner, command.reason,
        command.schedule_id
          ? h("span", {},
            h("a", { href: `#/schedules/${encodeURIComponent(command.schedule_id)}` },
              command.schedule_id),
            command.occurrence ? h("span", {}, " / ", commandsLink(
              { schedule: command.schedule_id, run: command.occurrence },
              instant(command.occurrence))) : null)
          : "—",
        h("span", { className: `state ${command.command_state}` },
          command.command_state.replace("_", " ")), ended(command),
        h("code", { title: command.command_id }, command.command_id.slice(0, 13))]),
      "No command matches."),
    next);
}
