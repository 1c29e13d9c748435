// Dead letters, and the scheduler config with the ranges the API documents.
import { P, api, get, may, query } from "./api.js";
import { attempt, fill, h, notice, table, when } from "./dom.js";

export async function deadLettersView({ main, session, params }) {
  if (!may(session.role, "SECURITY_ADMIN")) {
    fill(main, notice("Dead letters need the SECURITY_ADMIN role.", true));
    return;
  }
  const cursor = params.get("cursor") || "";
  const page = await get(`${P}/dead-letters${query({ limit: 50, cursor })}`);
  const result = h("div", { id: "action-result" });
  fill(main,
    h("h1", {}, `Dead letters (${page.count})`),
    result,
    table(["received", "topic", "partition/offset", "key", "error", "message", "redrive"],
      page.data.map((letter) => [when(letter.received_at), letter.source_topic,
        `${letter.partition ?? "—"}/${letter.offset ?? "—"}`, letter.key || "",
        h("span", { className: "bad" }, letter.error),
        h("code", {}, letter.raw.length > 160 ? `${letter.raw.slice(0, 160)}…` : letter.raw),
        redriveCell(letter, result, () => deadLettersView({ main, session, params }))]),
      "No dead letters."),
    page.next_cursor
      ? h("a", { href: `#/dead-letters${query({ cursor: page.next_cursor })}` }, "Older →")
      : null);
}

/** Send a letter back to its topic, as it was or as edited here; once redriven, again only
 * with force. The answer (or the API's refusal, a 422 naming the field) shows in `result`. */
function redriveCell(letter, result, reload) {
  const path = `${P}/dead-letters/${letter.event_id}/redrive`;
  const again = letter.redriven_at !== null && letter.redriven_at !== undefined;
  const send = async (body) => {
    const done = await attempt(result,
      () => api("POST", `${path}${query({ force: again ? "true" : "" })}`, body),
      "Redriven.");
    if (done) {
      await reload();
      mainElement().querySelector("#action-result")?.replaceChildren(
        notice(`Redriven to ${done.topic} as ${done.redrive_event_id}.`));
    }
  };
  const editor = h("textarea", { className: "redrive-body", rows: 6, cols: 60, hidden: true },
    letter.raw);
  const sendEdited = h("button", { className: "redrive-edited", hidden: true, onclick: () => {
    let body;
    try {
      body = JSON.parse(editor.value);
    } catch (error) {
      result.replaceChildren(notice(`Not JSON: ${error.message}`, true));
      return;
    }
    send({ body });
  } }, "Send edited");
  return h("div", { className: "redrive" },
    again ? h("div", { className: "muted" }, "redriven by ", letter.redriven_by, " ",
      when(letter.redriven_at)) : null,
    h("button", { className: "redrive", onclick: () => send(undefined) },
      again ? "Redrive again" : "Redrive"),
    h("button", { className: "secondary edit-redrive", onclick: () => {
      editor.hidden = sendEdited.hidden = false;
    } }, "Edit…"),
    editor, sendEdited);
}

function mainElement() {
  return document.getElementById("main");
}

export async function configView({ main, session }) {
  // The ranges come from the OpenAPI document, so the page cannot drift from the API.
  const [config, openapi] = await Promise.all([get(`${P}/config`),
    fetch("/openapi.json").then((response) => response.json())]);
  const schema = openapi.components.schemas.SchedulerConfigPublic.properties;
  const admin = may(session.role, "SECURITY_ADMIN");
  const names = Object.keys(schema).filter((name) => schema[name].type === "integer"
    && name !== "version");
  const result = h("div", { id: "action-result" });
  const inputs = {};
  const rows = names.map((name) => {
    const spec = schema[name];
    const value = admin
      ? (inputs[name] = h("input", { type: "number", name, value: config[name],
        min: spec.minimum, max: spec.maximum }))
      : config[name];
    return [name, value,
      h("span", { className: "nowrap" }, `${spec.minimum ?? "—"} … ${spec.maximum ?? "—"}`),
      spec.description || "", h("span", { className: "field-error", id: `error-${name}` })];
  });
  const form = h("form", { id: "config-form" },
    table(["field", "value", "range", "meaning", ""], rows),
    admin ? h("div", { className: "actions" }, h("button", { type: "submit" }, "Save changes"))
      : null);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const slot of form.querySelectorAll(".field-error")) slot.textContent = "";
    const changes = {};
    for (const [name, input] of Object.entries(inputs)) {
      if (Number(input.value) !== config[name]) changes[name] = Number(input.value);
    }
    if (!Object.keys(changes).length) {
      result.replaceChildren(notice("Nothing changed."));
      return;
    }
    await attempt(result, async () => {
      try {
        return await api("PUT", `${P}/config`, changes);
      } catch (error) {
        for (const item of error.errors) {
          const slot = form.querySelector(`#error-${item.field}`);
          if (slot) slot.textContent = item.message;
        }
        throw error;
      }
    }, "Change accepted; it applies once the worker has read it.");
  });
  const toggle = admin ? h("button", { className: "secondary", id: "toggle-dispatch",
    onclick: () => attempt(result,
      () => api("POST", `${P}/toggle${query({ enabled: !config.enabled })}`),
      config.enabled ? "Pause requested." : "Resume requested.") },
  config.enabled ? "Pause dispatch" : "Resume dispatch") : null;
  fill(main,
    h("h1", {}, `Scheduler config (version ${config.version})`),
    h("p", {}, `Dispatch is ${config.enabled ? "on" : "paused"}. `, toggle),
    result, form);
}
