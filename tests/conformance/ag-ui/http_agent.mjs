// Drives one run end to end with `@ag-ui/client`'s `HttpAgent` (the real client: it POSTs
// `RunAgentInput` to `/api/v1/agent/runs`, parses the SSE answer, runs `verifyEvents` on it and
// folds it into messages). Confirmation requests (CUSTOM `threadstream.confirmation-request`)
// are approved through `POST /instance-ai/confirm/:requestId`.
//
//   node http_agent.mjs <base-url> <thread-id> <message>
//
// stdout: {"types": [...event types in order], "messages": [...the agent's messages after the
// run], "newMessages": [...], "confirmations": N}; exit 1 when the run fails.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, 'package.json'));
const { HttpAgent } = require('@ag-ui/client');

const [base, threadId, message] = process.argv.slice(2);
if (!base || !threadId || !message) {
  process.stderr.write('usage: node http_agent.mjs <base-url> <thread-id> <message>\n');
  process.exit(2);
}

const agent = new HttpAgent({ url: `${base}/api/v1/agent/runs`, threadId });
agent.setMessages([{ id: 'user-1', role: 'user', content: message }]);
const types = [];
let confirmations = 0;
try {
  const { newMessages } = await agent.runAgent(
    {},
    {
      onEvent: ({ event }) => {
        types.push(event.type);
      },
      onCustomEvent: async ({ event }) => {
        if (event.name === 'threadstream.confirmation-request') {
          confirmations += 1;
          const r = await fetch(`${base}/instance-ai/confirm/${event.value.requestId}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ kind: 'approval', approved: true }),
          });
          if (!r.ok) throw new Error(`confirm answered ${r.status}: ${await r.text()}`);
        }
      },
    },
  );
  process.stdout.write(
    JSON.stringify({ types, messages: agent.messages, newMessages, confirmations }) + '\n',
  );
} catch (e) {
  process.stdout.write(JSON.stringify({ types, error: String(e && e.message ? e.message : e) }) + '\n');
  process.exit(1);
}
