// The scanner registry: each scanner's pool, timeout, retry delay and default priority; a
// SECURITY_ADMIN edits an entry, registers a scanner, or switches one off and on.
import { P, api, get, may, query } from "./api.js";
import { attempt, fill, h, notice, table } from "./dom.js";

const FIELDS = [
  ["max_concurrent", "pool (in flight at most)"],
  ["timeout_seconds", "timeout, s"],
  ["retry_delay_seconds", "retry delay, s"],
  ["default_priority", "default priority"],
];
const WAIT_MS = 6000;

/** Re-reads the registry until `holds` is true of the entry (the projection lags a write). */
async function settled(name, holds) {
  const started = Date.now();
  for (;;) {
    try {
      const entry = await get(`${P}/scanners/${encodeURIComponent(name)}`);
      if (holds(entry)) return entry;
    } catch (error) {
      if (error.status !== 404) throw error;
    }
    if (Date.now() - started > WAIT_MS) return null;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

function showErrors(form, error) {
  for (const item of error.errors) {
    const slot = form.querySelector(`#scanner-error-${item.field}`);
    if (slot) slot.textContent = item.message;
  }
}

function editForm(entry, schema, result, rerender) {
  const creating = !entry;
  const inputs = {};
  const name = creating ? h("input", { name: "name", required: true, placeholder: "nmap" }) : null;
  const rows = FIELDS.map(([field, label]) => {
    const spec = schema[field] || {};
    inputs[field] = h("input", { type: "number", name: field,
      value: entry ? entry[field] : spec.default, min: spec.minimum, max: spec.maximum });
    return h("label", {}, label, inputs[field],
      h("span", { className: "field-error", id: `scanner-error-${field}` }));
  });
  inputs.description = h("input", { name: "description", size: 40,
    value: entry ? entry.description : "" });
  const form = h("form", { className: "edit", id: "scanner-form" },
    h("h2", {}, creating ? "Register a scanner" : `Edit ${entry.name}`),
    creating ? h("label", {}, "name", name, h("span", { className: "field-error",
      id: "scanner-error-name" })) : null,
    rows,
    h("label", {}, "description", inputs.description,
      h("span", { className: "field-error", id: "scanner-error-description" })),
    h("div", { className: "actions" },
      h("button", { type: "submit", id: "save-scanner" }, creating ? "Register" : "Save")));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const slot of form.querySelectorAll(".field-error")) slot.textContent = "";
    const body = { description: inputs.description.value };
    for (const [field] of FIELDS) body[field] = Number(inputs[field].value);
    const target = creating ? name.value.trim() : entry.name;
    const path = `${P}/scanners/${encodeURIComponent(target)}`;
    const sent = await attempt(result, async () => {
      try {
        // A new scanner is PUT whole; an existing one is PATCHed, keeping its switch.
        return await api(creating ? "PUT" : "PATCH", `${path}${query({ wait: true })}`, body);
      } catch (error) {
        showErrors(form, error);
        throw error;
      }
    }, creating ? `Scanner ${target} registered.` : `Scanner ${target} saved.`);
    if (sent) {
      await settled(target, (now) => FIELDS.every(([field]) => now[field] === body[field]));
      await rerender();
    }
  });
  return form;
}

async function render(main, session, params) {
  const [registry, openapi] = await Promise.all([get(`${P}/scanners`),
    fetch("/openapi.json").then((response) => response.json())]);
  const schema = openapi.components.schemas.ScannerSpec
    ? openapi.components.schemas.ScannerSpec.properties : {};
  const admin = may(session.role, "SECURITY_ADMIN");
  const result = h("div", { id: "action-result" });
  const editing = params.get("edit");
  const rerender = async () => {
    const kept = [...result.childNodes];
    await render(main, session, params);
    main.querySelector("#action-result").replaceChildren(...kept);
  };

  function switchButton(entry) {
    const label = entry.is_active ? "Deactivate" : "Activate";
    return h("button", { className: "secondary switch-scanner", "data-name": entry.name,
      onclick: async () => {
        const wanted = !entry.is_active;
        const sent = await attempt(result, () => api("PATCH",
          `${P}/scanners/${encodeURIComponent(entry.name)}${query({ wait: true })}`,
          { is_active: wanted }),
        wanted ? `${entry.name} activated.` : `${entry.name} deactivated: its commands are held.`);
        if (sent) {
          await settled(entry.name, (now) => now.is_active === wanted);
          await rerender();
        }
      } }, label);
  }

  const rows = registry.data.map((entry) => [
    h("strong", {}, entry.name),
    entry.is_active ? h("span", { className: "state compliant" }, "active")
      : h("span", { className: "state critical" }, "inactive"),
    `${entry.in_flight} / ${entry.max_concurrent}`,
    `${entry.timeout_seconds} s`,
    `${entry.retry_delay_seconds} s`,
    entry.default_priority,
    entry.description || "",
    admin ? h("span", { className: "nowrap" },
      h("a", { href: `#/scanners${query({ edit: entry.name })}`, className: "edit-scanner" },
        "Edit"), " ", switchButton(entry)) : "",
  ]);
  const chosen = registry.data.find((entry) => entry.name === editing);
  fill(main,
    h("h1", {}, `Scanners (${registry.count})`),
    h("p", { className: "muted" },
      "Each scanner has its own pool of commands in flight, under the fleet-wide ",
      h("a", { href: "#/config" }, "max_concurrent_scans"),
      ". An inactive scanner's queued commands are held, never dropped; compliance runs with "
      + "the config's cap, timeout and retry delay until it is given its own entry."),
    result,
    h("div", { id: "scanners" },
      table(["name", "state", "in flight / pool", "timeout", "retry delay", "default priority",
        "description", ""], rows)),
    admin ? editForm(chosen || null, schema, result, rerender) : null,
    admin && chosen ? h("p", {}, h("a", { href: "#/scanners" }, "Register another scanner")) : null,
    editing && !chosen ? notice(`No scanner named ${editing}.`, true) : null);
}

export async function scannersView({ main, session, params }) {
  await render(main, session, params);
}
