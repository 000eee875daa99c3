// Reads a JSON-mode Durable Stream with @durable-streams/client's stream() and prints
// {"batches": [{"offset": "...", "items": [...]}, ...]} as JSON.
// Usage: node follow.mjs <URL> <offset|-1> <live: sse|long-poll|false> [stop-type stop-run-id]
// With a stop event (an n8n envelope's type and runId), it follows live until that event has
// arrived; without one it reads up to date and ends.
import { stream } from "@durable-streams/client";

const [url, offset, liveArg, stopType, stopRun] = process.argv.slice(2);
const live = liveArg === "false" ? false : liveArg;
const res = await stream({ url, offset, live });
const batches = [];
await new Promise((resolve, reject) => {
  const timer = setTimeout(() => reject(new Error("timed out following " + url)), 60_000);
  const unsubscribe = res.subscribeJson(async (batch) => {
    batches.push({ offset: batch.offset, upToDate: batch.upToDate, items: batch.items });
    const stop = stopType
      ? batch.items.some((e) => e.type === stopType && e.runId === stopRun)
      : batch.upToDate;
    if (stop) {
      clearTimeout(timer);
      unsubscribe();
      resolve();
    }
  });
  res.closed?.catch?.(reject);
});
res.cancel?.();
// Exit once stdout is flushed (a pipe takes 64 KiB at a time; the live reader would keep the
// process alive otherwise).
process.stdout.write(JSON.stringify({ batches }) + "\n", () => process.exit(0));
