// Hosts: a filtered list a page at a time, and one host with its history and actions.
import { P, api, get, may, query } from "./api.js";
import { attempt, badge, fill, h, notice, table, when } from "./dom.js";
import { commandsLink } from "./commands.js";
import { latestChanges } from "./audit.js";

const STATES = ["", "unknown", "critical", "low", "partial", "mostly_compliant", "compliant",
  "maintenance"];

export async function hostsView({ main, params }) {
  const filters = {
    state: params.get("state") || "",
    maintenance: params.get("maintenance") || "",
    overdue: params.get("overdue") || "",
    failing: params.get("failing") || "",
    organization: params.get("organization") || "",
    label: params.getAll("label"),
    cursor: params.get("cursor") || "",
  };
  const page = await get(`${P}/hosts${query({ ...filters, limit: 50 })}`);
  const choice = (name, options) => h("select", { name },
    options.map((value) => h("option", { value, selected: filters[name] === value },
      value || "any")));
  const form = h("form", { className: "filters", id: "host-filters" },
    h("label", {}, "State", choice("state", STATES)),
    h("label", {}, "Maintenance", choice("maintenance", ["", "true", "false"])),
    h("label", {}, "Overdue", choice("overdue", ["", "true", "false"])),
    h("label", {}, "Last scan failed", choice("failing", ["", "true", "false"])),
    h("label", {}, "Organization", h("input", { name: "organization", value: filters.organization })),
    h("label", {}, "Label (key=value)", h("input", { name: "label", value: filters.label[0] || "" })),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = Object.fromEntries(new FormData(form));
    location.hash = `#/hosts${query(values)}`;
  });
  const next = page.next_cursor
    ? h("a", { href: `#/hosts${query({ ...filters, cursor: page.next_cursor })}` }, "Next page →")
    : null;
  fill(main,
    h("h1", {}, `Hosts (${page.count})`), form,
    table(["host", "hostname", "organization", "state", "score", "next scan", "in flight",
      "maintenance", "status"], page.data.map((host) => [
      h("a", { href: `#/hosts/${encodeURIComponent(host.host_id)}` }, host.host_id),
      host.hostname || "", host.organization || "", badge(host.state),
      host.score === null ? "—" : host.score, when(host.next_scheduled_scan),
      host.in_flight_command_id ? "yes" : "", host.maintenance_mode ? "yes" : "",
      badge(host.status)]), "No host matches."),
    next);
}

function historyRow(entry) {
  if (entry.kind === "command") {
    return [when(entry.issued_at), "command", `${entry.reason} → ${entry.scanner}`,
      entry.outcome || "in flight", entry.command_id];
  }
  if (entry.kind === "withdrawn") {
    return [when(entry.withdrawn_at), "withdrawn", `claim withdrawn before issue (${entry.reason})`,
      "not scanned", entry.command_id];
  }
  return [when(entry.completed_at), "result", `${entry.status} score ${entry.score ?? "—"}`,
    entry.error || `${entry.failed} failed / ${entry.passed} passed`, entry.command_id];
}

export async function hostView({ main, session, args: [hostId] }) {
  const path = `${P}/hosts/${encodeURIComponent(hostId)}`;
  const [host, history, changes] = await Promise.all([get(path), get(`${path}/history?limit=20`),
    latestChanges(session, hostId).catch(() => null)]);
  const result = h("div", { id: "action-result" });
  const actions = [];
  if (may(session.role, "SECURITY_ANALYST")) {
    const hours = h("input", { type: "number", min: 1, max: 168, name: "duration_hours",
      placeholder: "hours (optional)" });
    actions.push(
      h("button", { id: "force-scan", onclick: () => attempt(result,
        () => api("POST", `${path}/force-scan`), "Force scan requested.") }, "Force scan"),
      host.maintenance_mode
        ? h("button", { id: "end-maintenance", onclick: () => attempt(result,
          () => api("PUT", `${path}/maintenance`, { enabled: false }),
          "Maintenance end requested.") }, "End maintenance")
        : h("span", {}, hours, " ", h("button", { id: "start-maintenance", onclick: () => {
          const body = { enabled: true };
          if (hours.value) body.duration_hours = Number(hours.value);
          return attempt(result, () => api("PUT", `${path}/maintenance`, body),
            "Maintenance requested.");
        } }, "Put in maintenance")));
  }
  if (may(session.role, "SECURITY_ADMIN")) {
    actions.push(...inventoryActions({ main, session, hostId, host, path, result }));
  }
  const rows = history.data.map(historyRow);
  const more = h("div");
  let cursor = history.next_cursor;
  const list = table(["when", "kind", "what", "outcome", "command"], rows, "No history yet.");
  if (cursor) {
    more.append(h("button", { className: "secondary", onclick: async (event) => {
      const page = await get(`${path}/history${query({ limit: 20, cursor })}`);
      const body = list.querySelector("tbody");
      for (const cells of page.data.map(historyRow)) {
        body.append(h("tr", {}, cells.map((cell) => h("td", {}, cell))));
      }
      cursor = page.next_cursor;
      if (!cursor) event.target.remove();
    } }, "Older entries"));
  }
  fill(main,
    h("h1", {}, `Host ${host.host_id}`, host.hostname ? ` (${host.hostname})` : ""),
    h("div", { className: "actions" }, actions), result,
    table(["", ""], [
      ["state", badge(host.state)], ["score", host.score ?? "—"],
      ["upcoming scan", when(host.next_scheduled_scan)],
      ["command in flight", host.in_flight_command_id || "none"],
      ["interval", `${host.current_interval_minutes} min`], ["priority", host.scan_priority],
      ["last scan", when(host.last_scan_completed)], ["last error", host.last_error || "—"],
      ["failures in a row", host.consecutive_scan_failures],
      ["maintenance", host.maintenance_mode ? h("span", {}, "yes, until ",
        when(host.maintenance_until)) : "no"],
      ["organization", host.organization || "—"],
      ["labels", Object.entries(host.labels).map(([k, v]) => `${k}=${v}`).join(", ") || "—"],
      ["active / status", `${host.is_active ? "active" : "inactive"} / ${host.status}`]]),
    h("h2", {}, `History (${history.count})`),
    commandsLink({ host: host.host_id }, "All commands of this host →"), list, more, changes);
}

/** Deactivate / reactivate / delete: inventory writes (SECURITY_ADMIN), each waiting for the
 * read model, then showing the host as it now is. */
function inventoryActions({ main, session, hostId, host, path, result }) {
  const thenShow = async (action, done, leave = false) => {
    const answer = await attempt(result, action, done);
    if (answer === undefined) return;
    if (leave) {
      location.hash = "#/hosts";
      return;
    }
    await hostView({ main, session, args: [hostId] });
    const late = answer.status === "accepted" ? " The read model does not show it yet." : "";
    main.querySelector("#action-result")?.replaceChildren(notice(done + late));
  };
  const activity = host.is_active
    ? h("button", { id: "deactivate-host", className: "secondary", onclick: () => thenShow(
      () => api("POST", `${path}/deactivate?wait=true`),
      "Deactivated: not scanned until reactivated.") }, "Deactivate")
    : h("button", { id: "reactivate-host", onclick: () => thenShow(
      () => api("POST", `${path}/reactivate?wait=true`), "Reactivated.") }, "Reactivate");
  const confirm = h("button", { id: "confirm-delete", className: "danger", hidden: true,
    onclick: () => thenShow(() => api("DELETE", `${path}?wait=true`), "Deleted.", true) },
  `Delete ${hostId} for good`);
  const ask = h("button", { id: "delete-host", className: "secondary", onclick: () => {
    ask.hidden = true;
    confirm.hidden = false;
  } }, "Delete…");
  return [activity, ask, confirm];
}
