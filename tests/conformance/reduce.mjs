// Folds event sequences with the real n8n reducer from a pinned @n8n/api-types and prints the trees.
//
//   node reduce.mjs [1.25.0|1.41.0] [--keep-times] < sequences.json
//
// stdin:  [{"name": "...", "rootAgentId"?: "...", "events": [<n8n envelope>, ...]}, ...]
// stdout: [{"name": "...", "tree": "<JSON.stringify(toAgentTree(state))>"} | {"name": "...", "error": "..."}]
//
// Each sequence starts from createInitialState(rootAgentId) (the reducer's own default when absent)
// and every event goes through reduceEvent unvalidated, as the n8n frontend feeds it. `startedAt`
// and `completedAt` are removed from tool calls (1.25.0 stamps them with the wall clock) unless
// --keep-times is given. The tree is returned as JSON text so the caller can compare bytes, key
// order included. A sequence on which the reducer throws reports the error instead of a tree.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { dirname, join } from 'node:path';

const args = process.argv.slice(2);
const version = args.find((a) => !a.startsWith('--')) ?? '1.25.0';
const keepTimes = args.includes('--keep-times');

const here = dirname(fileURLToPath(import.meta.url));
const folder = join(here, `n8n-${version}`);
if (!existsSync(join(folder, 'node_modules', '@n8n', 'api-types'))) {
  process.stderr.write(
    `@n8n/api-types ${version} is not installed in ${folder}; run: bash tests/conformance/install.sh\n`,
  );
  process.exit(2);
}
const require = createRequire(join(folder, 'package.json'));
const installed = require('@n8n/api-types/package.json').version;
if (installed !== version) {
  process.stderr.write(`expected @n8n/api-types ${version} in ${folder}, found ${installed}\n`);
  process.exit(2);
}
const { createInitialState, reduceEvent, toAgentTree } = require('@n8n/api-types');

function stripTimes(node) {
  for (const tc of node.toolCalls ?? []) {
    delete tc.startedAt;
    delete tc.completedAt;
  }
  for (const child of node.children ?? []) stripTimes(child);
}

let input = '';
process.stdin.setEncoding('utf8');
for await (const chunk of process.stdin) input += chunk;
const sequences = JSON.parse(input);

const out = sequences.map(({ name, rootAgentId, events }) => {
  try {
    const state =
      rootAgentId === undefined ? createInitialState() : createInitialState(rootAgentId);
    for (const event of events) reduceEvent(state, event);
    // Deep copy first: in 1.41.0 toAgentTree returns the live state objects.
    const tree = JSON.parse(JSON.stringify(toAgentTree(state)));
    if (!keepTimes) stripTimes(tree);
    return { name, tree: JSON.stringify(tree) };
  } catch (e) {
    return { name, error: `${e?.name ?? 'Error'}: ${e?.message ?? String(e)}` };
  }
});
process.stdout.write(JSON.stringify(out));
