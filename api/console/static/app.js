// The console's shell: sign-in, navigation by URL hash, and one view at a time.
import { api, may, token } from "./api.js";
import { auditView } from "./audit.js";
import { commandsView } from "./commands.js";
import { fill, h, notice } from "./dom.js";
import { deadLettersView, configView } from "./admin.js";
import { fleetView } from "./fleet.js";
import { forecastView } from "./forecast.js";
import { hostsView, hostView } from "./hosts.js";
import { scannersView } from "./scanners.js";
import { scheduleFormView, scheduleView, schedulesView } from "./schedules.js";
import { workersView } from "./workers.js";

const main = document.getElementById("main");
const session = { name: null, role: null };
let stopView = null;

const ROUTES = [
  [/^#?\/?$/, fleetView],
  [/^#\/hosts$/, hostsView],
  [/^#\/hosts\/(.+)$/, hostView],
  [/^#\/schedules$/, schedulesView],
  [/^#\/schedules\/new$/, scheduleFormView],
  [/^#\/schedules\/([^/]+)\/edit$/, scheduleFormView],
  [/^#\/schedules\/([^/]+)$/, scheduleView],
  [/^#\/dead-letters$/, deadLettersView],
  [/^#\/audit$/, auditView],
  [/^#\/config$/, configView],
  [/^#\/forecast$/, forecastView],
  [/^#\/commands$/, commandsView],
  [/^#\/workers$/, workersView],
  [/^#\/scanners$/, scannersView],
];

function signIn(message) {
  document.getElementById("nav").hidden = true;
  document.getElementById("who").replaceChildren();
  const input = h("input", { id: "token", name: "token", type: "password", required: true,
    autocomplete: "off", size: 48 });
  const form = h("form", { className: "edit login", id: "sign-in" },
    h("h1", {}, "Sign in"),
    h("p", { className: "muted" },
      "Paste a token from `kairos token create --role ROLE`. It is kept in this tab only."),
    message ? notice(message, true) : null,
    h("label", {}, "Token", input),
    h("button", { type: "submit" }, "Sign in"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    token.set(input.value.trim());
    start();
  });
  fill(main, form);
}

function signOut() {
  token.clear();
  session.name = session.role = null;
  if (stopView) stopView();
  signIn();
}

async function start() {
  if (!token.get()) return signIn();
  try {
    Object.assign(session, await api("GET", "/api/whoami"));
  } catch (error) {
    token.clear();
    return signIn(error.status === 401 ? "That token is unknown or revoked." : error.message);
  }
  const nav = document.getElementById("nav");
  nav.hidden = false;
  for (const link of nav.querySelectorAll("[data-role]")) {
    link.hidden = !may(session.role, link.dataset.role);
  }
  document.getElementById("who").replaceChildren(
    `${session.name} · ${session.role}`,
    h("button", { className: "secondary", id: "sign-out", onclick: signOut }, "Sign out"));
  route();
}

let routed = 0;
// The latest route asked for; a page rendered for an earlier one is not kept.

async function route() {
  if (!session.role) return;
  if (stopView) stopView();
  stopView = null;
  const hash = location.hash.split("?")[0];
  for (const [pattern, view] of ROUTES) {
    const match = hash.match(pattern);
    if (!match) continue;
    const params = new URLSearchParams(location.hash.split("?")[1] || "");
    const args = match.slice(1).map(decodeURIComponent);
    // Each page renders into a container of its own: one still loading when the next is
    // asked for fills its own detached container, never the page shown after it.
    const generation = ++routed;
    const page = h("div", { className: "page" }, h("p", { className: "muted" }, "Loading…"));
    fill(main, page);
    try {
      const stop = (await view({ main: page, session, params, args })) || null;
      if (generation === routed) stopView = stop;
      else if (stop) stop();
    } catch (error) {
      fill(page, notice(`${error.status || ""} ${error.message}`, true));
    }
    return;
  }
  fill(main, notice("No such page.", true));
}

window.addEventListener("hashchange", route);
window.addEventListener("kairos:signed-out", () => signIn("The API refused the token; sign in again."));
start();
