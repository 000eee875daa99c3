#!/usr/bin/env bash
# Installs the pinned npm oracles the conformance tests run against:
#   n8n-1.25.0/  @n8n/api-types 1.25.0 + zod 3.25.67 (classic 15-type schema and reducer)
#   n8n-1.41.0/  @n8n/api-types 1.41.0 + zod 3.25.76 (21-type superset)
# Idempotent: a folder whose node_modules already matches its package-lock.json is left alone.
# --ignore-scripts: a transitive dependency's native build fails on these machines and nothing we
# use needs it. --legacy-peer-deps: 1.25.0's peer range on zod does not resolve otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install.sh: node and npm are required (Node 20 or newer)" >&2
  exit 1
fi

for version in 1.25.0 1.41.0; do
  dir="$here/n8n-$version"
  marker="$dir/node_modules/.package-lock.json"
  # npm ci writes node_modules/.package-lock.json; if it is newer than the committed lock and the
  # package resolves to the pinned version, the install is current.
  if [[ -f "$marker" && "$marker" -nt "$dir/package-lock.json" ]] &&
    [[ "$(cd "$dir" && node -p "require('@n8n/api-types/package.json').version" 2>/dev/null)" == "$version" ]]; then
    echo "n8n-$version: already installed"
    continue
  fi
  echo "n8n-$version: npm ci"
  (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --legacy-peer-deps --loglevel=error)
  (cd "$dir" && node -e "
    const v = require('@n8n/api-types/package.json').version;
    if (v !== '$version') { console.error('expected @n8n/api-types $version, got ' + v); process.exit(1); }
    const api = require('@n8n/api-types');
    for (const f of ['instanceAiEventSchema', 'createInitialState', 'reduceEvent', 'toAgentTree']) {
      if (!api[f]) { console.error('@n8n/api-types $version does not export ' + f); process.exit(1); }
    }
    console.log('n8n-$version: ok');
  ")
done
