// The JSON API, as the console calls it: every call carries the signed-in token.
const TOKEN_KEY = "kairos.token";
export const P = "/api/compliance/scheduler";
export const J = "/api/scheduled-jobs";
export const ROLES = ["GUEST", "SECURITY_ANALYST", "SECURITY_ADMIN", "SUPER_ADMIN"];

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.detail) || `HTTP ${status}`);
    this.status = status;
    this.errors = (body && body.errors) || [];
  }
}

export async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${token.get()}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { detail: text }; }
  if (!response.ok) {
    if (response.status === 401) window.dispatchEvent(new CustomEvent("kairos:signed-out"));
    throw new ApiError(response.status, data);
  }
  return data;
}

export const get = (path) => api("GET", path);

/** Whether `role` (the token's) may do what needs `needed` (roles are ordered). */
export function may(role, needed) {
  const have = ROLES.indexOf(role);
  return have >= 0 && have >= ROLES.indexOf(needed);
}

export function query(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params)) {
    if (Array.isArray(value)) value.forEach((item) => search.append(key, item));
    else if (value !== undefined && value !== null && value !== "") search.set(key, value);
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}
