// The page's HTTP client: relative URLs, same-origin cookies, and one error type carrying the
// server's `{"error": {"code", "message"}}`. A 401 asks the page for an access token.

export class ApiFailure extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

let onUnauthorized: () => void = () => {};

/** Called on every 401, so the page can show its access-token form. */
export function setUnauthorizedHandler(f: () => void): void {
  onUnauthorized = f;
}

export async function api<T = any>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.body = JSON.stringify(body);
    (init.headers as Record<string, string>)['Content-Type'] = 'application/json';
  }
  let res: Response;
  try {
    res = await fetch(path, init);
  } catch (e) {
    throw new ApiFailure(0, 'network', `cannot reach the server (${(e as Error).message})`);
  }
  if (res.status === 401) onUnauthorized();
  if (!res.ok) {
    let code = `http_${res.status}`;
    let message = res.statusText || `HTTP ${res.status}`;
    try {
      const j = await res.json();
      code = j?.error?.code ?? code;
      message = j?.error?.message ?? message;
    } catch {
      // Not our JSON (a proxy's page): keep the status line.
    }
    throw new ApiFailure(res.status, code, message);
  }
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

/** `POST /instance-ai/session` with the token as a bearer: the server answers with a cookie. */
export async function logIn(token: string): Promise<void> {
  const res = await fetch('/instance-ai/session', {
    method: 'POST',
    credentials: 'same-origin',
    headers: { Authorization: `Bearer ${token}` },
  });
  if (!res.ok) {
    let message = `HTTP ${res.status}`;
    try {
      message = (await res.json())?.error?.message ?? message;
    } catch {
      // keep the status
    }
    throw new ApiFailure(res.status, 'login_failed', message);
  }
}

export const enc = encodeURIComponent;
