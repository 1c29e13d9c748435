// Fleet status: hosts by state, in flight against the cap, due soon, overdue, dispatch
// lateness, alerts firing, failures.
import { J, P, get, may } from "./api.js";
import { badge, fill, h, notice, table, when } from "./dom.js";

export const REFRESH_MS = 5000;

function card(label, value, extra) {
  return h("div", { className: "card" },
    h("div", { className: "value" }, value), h("div", { className: "label" }, label), extra);
}

function subjectLink(alert) {
  const id = encodeURIComponent(alert.subject_id);
  if (alert.subject_type === "host") return h("a", { href: `#/hosts/${id}` }, alert.subject_id);
  if (alert.subject_type === "schedule") return h("a", { href: `#/schedules/${id}` }, alert.subject_id);
  return alert.subject_id;
}

async function render(main, session) {
  const [status, jobs, failingHosts, alerts] = await Promise.all([get(`${P}/status?upcoming=10`),
    get(`${J}?limit=500`), get(`${P}/hosts?failing=true&limit=10`),
    get(`${P}/alerts?state=firing&limit=10`)]);
  const letters = may(session.role, "SECURITY_ADMIN")
    ? await get(`${P}/dead-letters?limit=1`).catch(() => null) : null;
  const share = Math.min(100, (100 * status.in_flight) / Math.max(1, status.max_concurrent_scans));
  const failing = jobs.data.filter((job) => job.consecutive_failures > 0 || job.last_error);
  const lag = status.projection_lag_seconds;
  const late = status.dispatch_lateness;
  fill(main,
    h("h1", {}, "Fleet status"),
    status.enabled ? null : notice(`Dispatch is paused (scheduler disabled): ${status.held}`
      + " claimed commands are held, and go out in rank order once it is on again.", true),
    h("div", { className: "cards", id: "fleet-cards" },
      card("hosts", status.hosts_total),
      card("in flight / cap", `${status.in_flight} / ${status.max_concurrent_scans}`,
        h("div", { className: "bar" }, h("div", { style: `width: ${share}%` }))),
      card(status.enabled ? "waiting for a slot" : "held (scheduler off)", status.waiting),
      card("due in the next hour", status.due_next_hour),
      card("overdue", status.overdue),
      card("past the 48 h promise", status.past_promise),
      card("in maintenance", status.maintenance),
      card("down", status.down),
      card("dispatch lateness, p99", late ? `${late.p99_seconds.toFixed(2)} s` : "—",
        h("div", { className: "muted" }, late
          ? `p50 ${late.p50_seconds.toFixed(2)} s, max ${late.max_seconds.toFixed(2)} s,`
            + ` last ${late.commands} commands`
          : "no command in the last hour")),
      card("projection lag", lag === null ? "—" : `${lag.toFixed(1)} s`),
      card("alerts firing", alerts.firing),
      letters ? card("dead letters", letters.count) : null),
    h("h2", {}, "Alerts firing"),
    table(["raised", "alert", "subject", "summary"], alerts.data.map((alert) => [
      when(alert.raised_at), h("span", { className: alert.severity === "critical" ? "bad" : "" },
        alert.alert_type), subjectLink(alert), alert.summary]), "No alert is firing."),
    h("h2", {}, "Hosts by state"),
    table(["state", "hosts"], Object.entries(status.by_state).map(([state, count]) => [
      h("a", { href: `#/hosts?state=${state}` }, badge(state)), count])),
    h("h2", {}, "Next scans due"),
    table(["host", "state", "due", "priority"], status.upcoming.map((item) => [
      h("a", { href: `#/hosts/${encodeURIComponent(item.host_id)}` }, item.hostname || item.host_id),
      badge(item.state), when(item.due_at), item.priority]), "No host is waiting."),
    h("h2", {}, "Recent failures"),
    table(["host", "state", "failures in a row", "next try"], failingHosts.data.map((host) => [
      h("a", { href: `#/hosts/${encodeURIComponent(host.host_id)}` }, host.host_id),
      badge(host.state), host.consecutive_scan_failures, when(host.next_scheduled_scan)]),
    "No host's latest scan failed."),
    failingHosts.next_cursor
      ? h("a", { href: "#/hosts?failing=true" }, `All ${failingHosts.count} failing hosts →`) : null,
    table(["schedule", "failures in a row", "failed runs", "last error", "last run"],
      failing.map((job) => [
        h("a", { href: `#/schedules/${encodeURIComponent(job.name)}` }, job.name),
        job.consecutive_failures, job.failed_runs,
        h("span", { className: "bad" }, job.last_error || ""), when(job.last_fired_at)]),
      "No schedule is failing."),
    h("p", { className: "muted" },
      `As of ${status.as_of}; refreshes every ${REFRESH_MS / 1000} s. `,
      `${status.unmatched_results} unmatched results.`));
}

export async function fleetView({ main, session }) {
  await render(main, session);
  const timer = setInterval(() => render(main, session).catch(() => {}), REFRESH_MS);
  return () => clearInterval(timer);
}
