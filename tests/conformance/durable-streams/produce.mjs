// Appends to a JSON-mode Durable Stream with the real IdempotentProducer of
// @durable-streams/client, then prints {"acknowledged": N, "errors": [...]}.
// Usage: node produce.mjs <stream URL> <N> [items|run]
//   items: the items {"i": 0..N-1}
//   run:   one agent run as n8n events, for a thread read as a stream (/v1/threads/:id):
//          run-start, N text-deltas with texts "0".."N-1", run-finish
// The producer itself does not retry lost connections (its docs: "Does NOT implement general
// retry/backoff for network errors"), so it is given a fetch that retries a request whose
// answer never came (a reset, a refused connection while the server restarts, a 5xx) with the
// same body: exactly the retry that idempotent producers make safe.
import { DurableStream, IdempotentProducer } from "@durable-streams/client";

const [url, n, kind = "items"] = [process.argv[2], Number(process.argv[3]), process.argv[4]];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function retryingFetch(input, init) {
  for (let attempt = 0; ; attempt++) {
    try {
      const r = await fetch(input, init);
      if (r.status < 500) return r;
      await r.arrayBuffer();
    } catch (e) {
      if (attempt > 400) throw e;
    }
    await sleep(Math.min(20 * 2 ** attempt, 250));
  }
}

const errors = [];
const stream = new DurableStream({ url, contentType: "application/json", fetch: retryingFetch });
const producer = new IdempotentProducer(stream, "exactly-once-producer", {
  lingerMs: 1,
  // Small batches: hundreds of requests, so some answers are lost and the kill lands mid-run.
  maxBatchBytes: 64,
  maxInFlight: 4,
  fetch: retryingFetch,
  onError: (e) => errors.push(String(e)),
});
const ev = (type, payload) => JSON.stringify({ type, runId: "run-p", agentId: "agent-p", payload });
if (kind === "run") producer.append(ev("run-start", { messageId: "msg-p" }));
for (let i = 0; i < n; i++) {
  producer.append(kind === "run" ? ev("text-delta", { text: String(i) }) : JSON.stringify({ i }));
}
if (kind === "run") producer.append(ev("run-finish", { status: "completed" }));
await producer.flush();
console.log(JSON.stringify({ acknowledged: errors.length === 0 ? n : null, errors }));
