// Checks captured AG-UI streams with the real tools of the ecosystem, pinned in package.json:
// every event through `@ag-ui/core` `EventSchemas` (Zod), and each stream as a whole through
// `@ag-ui/client` `verifyEvents` (the state machine the client runs on every stream).
//
//   node check.mjs < streams.json
//
// stdin: {"streams": [{"name": "...", "sse": "<the raw text/event-stream body>"}]}
// stdout: {"results": [{"name", "events", "schemaFailures": [{index, type, issues}],
//          "verifyError": null | "message"}]}
// Exit status: 0 when every stream passed, 1 on any failure, 2 on usage or installation errors.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
if (!existsSync(join(here, 'node_modules', '@ag-ui', 'client'))) {
  process.stderr.write(
    `@ag-ui/client is not installed in ${here}; run: bash tests/conformance/install.sh\n`,
  );
  process.exit(2);
}
const require = createRequire(join(here, 'package.json'));
const { EventSchemas } = require('@ag-ui/core/schemas');
const { verifyEvents } = require('@ag-ui/client');
const { from, lastValueFrom, toArray } = require('rxjs');

/** The `data:` payloads of an SSE body, one per dispatched event (WHATWG rules, LF only). */
function sseData(text) {
  const out = [];
  for (const block of text.split('\n\n')) {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length > 0) out.push(data.join('\n'));
  }
  return out;
}

let input = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) input += chunk;
const { streams } = JSON.parse(input);
if (!Array.isArray(streams) || streams.length === 0) {
  process.stderr.write('usage: node check.mjs < {"streams": [{"name", "sse"}]}\n');
  process.exit(2);
}

const results = [];
for (const { name, sse } of streams) {
  const schemaFailures = [];
  const events = [];
  sseData(sse).forEach((raw, index) => {
    let value;
    try {
      value = JSON.parse(raw);
    } catch (e) {
      schemaFailures.push({ index, type: null, issues: [{ message: `invalid JSON: ${e.message}` }] });
      return;
    }
    const r = EventSchemas.safeParse(value);
    if (!r.success) schemaFailures.push({ index, type: value.type, issues: r.error.issues });
    events.push(value);
  });
  let verifyError = null;
  try {
    await lastValueFrom(from(events).pipe(verifyEvents(false), toArray()));
  } catch (e) {
    verifyError = String(e && e.message ? e.message : e);
  }
  if (events.length === 0) verifyError = verifyError ?? 'no events in the stream';
  results.push({ name, events: events.length, schemaFailures, verifyError });
}
// exitCode, not exit(): exit() can cut a long report short on a pipe.
process.stdout.write(JSON.stringify({ results }) + '\n');
process.exitCode = results.every((r) => r.schemaFailures.length === 0 && r.verifyError === null) ? 0 : 1;
