// The audit trail: who changed what, and when (SECURITY_ANALYST and above).
import { P, get, may, query } from "./api.js";
import { fill, h, notice, table, when } from "./dom.js";

const FILTERS = ["actor", "type", "subject", "since", "until"];

function rows(entries) {
  return entries.map((entry) => [when(entry.at), entry.actor ?? h("span", { className: "muted" }, "—"),
    entry.type, `${entry.subject_kind} ${entry.subject_id}`,
    h("code", {}, JSON.stringify(entry.summary))]);
}

export async function auditView({ main, session, params }) {
  if (!may(session.role, "SECURITY_ANALYST")) {
    fill(main, notice("The audit trail needs the SECURITY_ANALYST role.", true));
    return;
  }
  const filters = Object.fromEntries(FILTERS.map((name) => [name, params.get(name) || ""]));
  const page = await get(`${P}/audit${query({ ...filters, limit: 50,
    cursor: params.get("cursor") || "" })}`);
  const inputs = FILTERS.map((name) => h("label", {}, name,
    h("input", { name, value: filters[name], size: 18,
      placeholder: name === "since" || name === "until" ? "2030-01-01T00:00:00Z" : "" })));
  const form = h("form", { className: "filters", id: "audit-filters" }, inputs,
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const chosen = Object.fromEntries(FILTERS.map((name) => [name, form.elements[name].value.trim()]));
    location.hash = `#/audit${query(chosen)}`;
  });
  fill(main,
    h("h1", {}, `Audit (${page.count})`),
    form,
    table(["at", "actor", "change", "subject", "summary"], rows(page.data), "No changes recorded."),
    page.next_cursor
      ? h("a", { href: `#/audit${query({ ...filters, cursor: page.next_cursor })}` }, "Older →")
      : null);
}

/** The latest audit rows about one host or schedule, for its page; null below ANALYST. */
export async function latestChanges(session, subject) {
  if (!may(session.role, "SECURITY_ANALYST")) return null;
  const page = await get(`${P}/audit${query({ subject, limit: 5 })}`);
  return h("section", { id: "latest-changes" },
    h("h2", {}, "Latest changes"),
    table(["at", "actor", "change", "subject", "summary"], rows(page.data), "No changes recorded."),
    page.count > page.data.length
      ? h("a", { href: `#/audit${query({ subject })}` }, `All ${page.count} →`) : null);
}
