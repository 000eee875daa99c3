// A tiny client typed by the types openapi-typescript generates from docs/openapi.json
// (written to ./generated/schema.d.ts by tests/blackbox/openapi.rs, then `tsc --noEmit`).
import type { components, paths } from "./generated/schema";

type ThreadSummary = components["schemas"]["ThreadSummary"];
type CreateBody = components["schemas"]["CreateBody"];
type ErrorBody = components["schemas"]["ErrorBody"];
type ThreadList =
  paths["/instance-ai/threads"]["get"]["responses"][200]["content"]["application/json"];
type ChatBody =
  paths["/instance-ai/chat/{thread_id}"]["post"]["requestBody"]["content"]["application/json"];

export async function createThread(base: string, body: CreateBody): Promise<ThreadSummary> {
  const r = await fetch(`${base}/instance-ai/threads`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!r.ok) {
    const e = (await r.json()) as ErrorBody;
    throw new Error(`${e.error.code}: ${e.error.message}`);
  }
  return (await r.json()) as ThreadSummary;
}

export async function listThreads(base: string): Promise<string[]> {
  const list = (await (await fetch(`${base}/instance-ai/threads`)).json()) as ThreadList;
  return list.threads.map((t: ThreadSummary) => `${t.id} ${t.title ?? ""} ${t.lastEventId + 1}`);
}

export function chatBody(message: string): ChatBody {
  return { message };
}
