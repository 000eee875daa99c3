// Validates n8n Instance AI event envelopes against the published schema of a pinned version.
//
//   node validate.mjs 1.25.0 < events.ndjson      (or 1.41.0)
//
// stdin: one JSON envelope per line ({type, runId, agentId, payload, userId?, responseId?, ts?});
// blank lines are skipped. Each line goes through `instanceAiEventSchema.safeParse`.
// stdout: {"checked": N, "failures": [{"line": i, "issues": [...]}]}; `line` is 1-based and
// `issues` is Zod's issue list (or a single {message} when the line is not JSON).
// Exit status: 0 when every line passed, 1 on any failure, 2 on usage or installation errors.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const version = process.argv[2];
if (version !== '1.25.0' && version !== '1.41.0') {
  process.stderr.write('usage: node validate.mjs <1.25.0|1.41.0> < events.ndjson\n');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const folder = join(here, `n8n-${version}`);
if (!existsSync(join(folder, 'node_modules', '@n8n', 'api-types'))) {
  process.stderr.write(
    `@n8n/api-types ${version} is not installed in ${folder}; run: bash tests/conformance/install.sh\n`,
  );
  process.exit(2);
}
const require = createRequire(join(folder, 'package.json'));
const { instanceAiEventSchema } = require('@n8n/api-types');

let input = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) input += chunk;

let checked = 0;
const failures = [];
input.split('\n').forEach((raw, index) => {
  const text = raw.trim();
  if (text === '') return;
  checked += 1;
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    failures.push({ line: index + 1, issues: [{ message: `invalid JSON: ${e.message}` }] });
    return;
  }
  const result = instanceAiEventSchema.safeParse(value);
  if (!result.success) failures.push({ line: index + 1, issues: result.error.issues });
});

process.stdout.write(JSON.stringify({ checked, failures }) + '\n');
process.exit(failures.length > 0 ? 1 : 0);
