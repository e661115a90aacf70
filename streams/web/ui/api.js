// Calls to the service's API, and the token when credentials are configured.
//
// A 401 opens the token dialog once (every caller waiting meanwhile shares it); the token goes in
// the `ledgermem_token` cookie, which the service accepts like a Bearer header. A cookie is the
// only credential EventSource can send, which is why the page keeps the token there and not in
// memory or localStorage.

import { $ } from "./dom.js";

const COOKIE = "ledgermem_token";
// RFC 6265 cookie-octets: a token outside them cannot be kept in a cookie unchanged.
const COOKIE_SAFE = /^[\x21\x23-\x2B\x2D-\x3A\x3C-\x5B\x5D-\x7E]+$/;

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let asking = null; // the pending token prompt, shared by every 401 meanwhile

export function hasTokenCookie() {
  return document.cookie.split("; ").some((c) => c.startsWith(COOKIE + "="));
}

export function forgetToken() {
  document.cookie = `${COOKIE}=; path=/; max-age=0; samesite=strict`;
}

function keepToken(token) {
  const secure = location.protocol === "https:" ? "; secure" : "";
  // No max-age: the cookie lasts as long as the browser session.
  document.cookie = `${COOKIE}=${token}; path=/; samesite=strict${secure}`;
}

export function askForToken(refused) {
  if (asking) return asking;
  const dialog = $("token-dialog");
  const form = $("token-form");
  const input = $("token-input");
  const error = $("token-error");
  error.textContent = refused ? "The service refused that token. Try another." : "";
  asking = new Promise((resolve) => {
    const submit = (event) => {
      event.preventDefault();
      const token = input.value.trim();
      if (!COOKIE_SAFE.test(token)) {
        error.textContent = "That token has characters a cookie cannot hold (spaces, ; , \" or \\).";
        return;
      }
      keepToken(token);
      input.value = "";
      form.removeEventListener("submit", submit);
      dialog.close();
      asking = null;
      resolve();
    };
    form.addEventListener("submit", submit);
    // Escape would close the dialog and leave every call waiting: keep it open instead.
    dialog.addEventListener("cancel", (event) => event.preventDefault(), { once: true });
    dialog.showModal();
    input.focus();
  });
  return asking;
}

async function request(path, parse, init = {}) {
  let refused = false;
  for (;;) {
    const response = await fetch(path, {
      credentials: "same-origin",
      ...init,
      headers: { accept: "application/json", ...(init.headers || {}) },
    });
    if (response.status === 401) {
      // A cookie we already had was refused: say so in the prompt.
      refused = refused || hasTokenCookie();
      await askForToken(refused);
      refused = true;
      continue;
    }
    if (!response.ok) {
      let code = "http_error";
      let message = `${response.status} ${response.statusText}`;
      try {
        const body = await response.json();
        code = body.error.code;
        message = body.error.message;
      } catch {
        // not the service's JSON error: keep the status line
      }
      throw new ApiError(response.status, code, message);
    }
    return parse(response);
  }
}

export function getJSON(path) {
  return request(path, (r) => r.json());
}

// The body and the session version its ETag names (`"<seq>"`), or null without one.
export function getVersioned(path) {
  return request(path, async (r) => {
    const tag = (r.headers.get("etag") || "").replace(/^W\//, "").replace(/"/g, "");
    return { body: await r.json(), version: /^\d+$/.test(tag) ? Number(tag) : null };
  });
}

// A write: JSON in, JSON out. The service refuses bodies without this content type (415).
export function postJSON(path, body = {}) {
  return request(path, (r) => r.json(), {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

export function getText(path) {
  return request(path, (r) => r.text());
}

export function sessionPath(id, rest = "") {
  return `/v1/sessions/${encodeURIComponent(id)}${rest}`;
}
