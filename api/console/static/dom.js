// A tiny element builder: text always goes in as text, never as HTML.
export function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "className") element.className = value;
    else if (key in element && typeof value !== "string") element[key] = value;
    else element.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** Replaces what `element` shows; null and false children are left out. */
export function fill(element, ...children) {
  element.replaceChildren(...children.flat().filter((child) => child !== null && child !== false
    && child !== undefined));
}

export function table(headers, rows, empty = "Nothing here.") {
  if (!rows.length) return h("p", { className: "muted" }, empty);
  return h("table", {},
    h("thead", {}, h("tr", {}, headers.map((name) => h("th", {}, name)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((cell) => h("td", {}, cell))))));
}

export function when(value) {
  if (!value) return h("span", { className: "muted" }, "—");
  const date = new Date(value);
  const seconds = Math.round((date - Date.now()) / 1000);
  const size = Math.abs(seconds);
  const amount = size < 90 ? `${size}s` : size < 5400 ? `${Math.round(size / 60)}m`
    : size < 172800 ? `${Math.round(size / 3600)}h` : `${Math.round(size / 86400)}d`;
  const relative = seconds >= 0 ? `in ${amount}` : `${amount} ago`;
  return h("span", { title: date.toISOString() },
    `${date.toISOString().replace("T", " ").slice(0, 19)}Z (${relative})`);
}

export function badge(value) {
  return h("span", { className: `state ${value}` }, value);
}

export function notice(message, error = false) {
  return h("div", { className: error ? "notice error" : "notice", role: "status" }, message);
}

/** Calls `action`, reporting success or the API's refusal in `where`. */
export async function attempt(where, action, done) {
  where.replaceChildren(notice("Sending…"));
  try {
    const result = await action();
    where.replaceChildren(notice(done));
    return result;
  } catch (error) {
    where.replaceChildren(notice(`${error.status || ""} ${error.message}`, true));
    return undefined;
  }
}
