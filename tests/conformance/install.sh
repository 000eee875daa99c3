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

# pip_venv LABEL DIR PIN...: the PyPI packages PIN (`name==version` or `name[extra]==version`) in
# DIR/.venv, installed unless every one is there at its version already.
pip_venv() {
  local label=$1 dir=$2 pin name
  shift 2
  for pin in "$@"; do
    name="${pin%%==*}"
    if [[ "$("$dir/.venv/bin/pip" show "${name%%\[*}" 2>/dev/null | sed -n 's/^Version: //p')" != "${pin#*==}" ]]; then
      echo "$label: pip install $*"
      python3 -m venv "$dir/.venv"
      "$dir/.venv/bin/pip" install --quiet --disable-pip-version-check "$@"
      return
    fi
  done
  echo "$label: already installed"
}

# AG-UI oracles:
#   ag-ui/node_modules  @ag-ui/core 1.0.0 (EventSchemas) + @ag-ui/client 1.0.0 (verifyEvents, HttpAgent)
#   ag-ui/.venv         PyPI ag-ui-validate 0.4.0 (the conformance checker, run on captured streams)
agui="$here/ag-ui"
if [[ -f "$agui/node_modules/.package-lock.json" && "$agui/node_modules/.package-lock.json" -nt "$agui/package-lock.json" ]] &&
  [[ "$(cd "$agui" && node -p "require('@ag-ui/client/package.json').version" 2>/dev/null)" == "1.0.0" ]]; then
  echo "ag-ui: already installed"
else
  echo "ag-ui: npm ci"
  (cd "$agui" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
(cd "$agui" && node -e "
  for (const p of ['@ag-ui/core', '@ag-ui/client']) {
    const v = require(p + '/package.json').version;
    if (v !== '1.0.0') { console.error('expected ' + p + ' 1.0.0, got ' + v); process.exit(1); }
  }
  if (!require('@ag-ui/core/schemas').EventSchemas || !require('@ag-ui/client').verifyEvents) {
    console.error('@ag-ui packages lack EventSchemas / verifyEvents'); process.exit(1);
  }
  console.log('ag-ui: ok');
")
validate_version=0.4.0
pip_venv ag-ui-validate "$agui" "ag-ui-validate==$validate_version"
"$agui/.venv/bin/ag-ui-validate" --help >/dev/null && echo "ag-ui-validate $validate_version: ok"

# Upstream AG-UI agents (agui-agents/): real pydantic-ai and LangGraph (ag-ui-langgraph) servers
# on scripted fake models, no LLM, that the tests start and call as upstream agents, and the
# OpenAI clients of docs/integrations.md's two agent snippets (tests/blackbox/agui_agents_docs.rs
# runs them against a fake OpenAI server). The pins live in agui-agents/requirements.txt
# (pydantic-ai-slim[ag-ui,openai] 2.68.0, uvicorn 0.54.0, langgraph 1.2.22, ag-ui-langgraph
# 0.0.47, langchain-core 1.8.1, fastapi 0.165.0, langchain-openai 1.8.1).
agents="$here/agui-agents"
mapfile -t agents_pins < <(grep -Ev '^[[:space:]]*(#|$)' "$agents/requirements.txt")
pip_venv agui-agents "$agents" "${agents_pins[@]}"
"$agents/.venv/bin/python" -c "
from pydantic_ai.ui.ag_ui import AGUIAdapter
from pydantic_ai.models.function import FunctionModel
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langgraph.checkpoint.memory import MemorySaver
from pydantic_ai.models.openai import OpenAIChatModel
from langchain_openai import ChatOpenAI
import fastapi, uvicorn
" && echo "agui-agents (PyPI) pydantic-ai-slim, ag-ui-langgraph, langchain-openai: ok"

# Durable Streams (tests/blackbox/durable_streams.rs): the official server conformance suite
# @durable-streams/server-conformance-tests 0.3.6 (with the vitest it brings), the client
# @durable-streams/client 0.2.7 (stream(), IdempotentProducer), and the Node reference server
# @durable-streams/server 0.3.7 (the benchmark's baseline).
ds="$here/durable-streams"
if [[ -f "$ds/node_modules/.package-lock.json" && "$ds/node_modules/.package-lock.json" -nt "$ds/package-lock.json" ]] &&
  [[ "$(cd "$ds" && node -p "require('@durable-streams/server-conformance-tests/package.json').version" 2>/dev/null)" == "0.3.6" ]]; then
  echo "durable-streams: already installed"
else
  echo "durable-streams: npm ci"
  (cd "$ds" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
# The reference's file store needs lmdb's native binary: --ignore-scripts is enough, lmdb and
# msgpackr-extract load the prebuilt ones of their per-platform npm packages (@lmdb/lmdb-linux-x64,
# …, optional dependencies). Opening an LMDB database proves it (`threadstream-bench durable-streams`).
(cd "$ds" && node -e "
  const dir = require('fs').mkdtempSync(require('os').tmpdir() + '/lmdb-check-');
  const db = require('lmdb').open({ path: dir });
  db.putSync('k', 1);
  if (db.get('k') !== 1) { console.error('lmdb does not work'); process.exit(1); }
  db.close();
  require('fs').rmSync(dir, { recursive: true });
  console.log('durable-streams: ok (@durable-streams/server ' + require('@durable-streams/server/package.json').version + ', lmdb native)');
")

# The browser tests (tests/blackbox/browser.rs): playwright-core 1.64.1 driving Debian's Chromium, and the
# web page's pinned esbuild + typescript (api/web) for the bundle-freshness check.
for dir in "$here/../browser" "$here/../../api/web"; do
  name="$(basename "$dir")"
  if [[ -f "$dir/node_modules/.package-lock.json" && "$dir/node_modules/.package-lock.json" -nt "$dir/package-lock.json" ]]; then
    echo "$name: already installed"
  else
    echo "$name: npm ci"
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
done
if [[ ! -x /usr/bin/chromium ]]; then
  echo "chromium: apt-get install -y chromium"
  if [[ "$(id -u)" == 0 ]]; then apt-get install -y chromium; else sudo apt-get install -y chromium; fi
fi
echo "chromium: $(/usr/bin/chromium --version 2>/dev/null || echo missing)"

# The fleet tests (tests/blackbox/fleet.rs): Debian's HAProxy in front of three instances.
if ! command -v haproxy >/dev/null && [[ ! -x /usr/sbin/haproxy ]]; then
  echo "haproxy: apt-get install -y haproxy"
  if [[ "$(id -u)" == 0 ]]; then apt-get install -y haproxy; else sudo apt-get install -y haproxy; fi
fi
echo "haproxy: $( (/usr/sbin/haproxy -v 2>/dev/null || haproxy -v 2>/dev/null) | head -1 || echo missing)"

# The high-availability tests (tests/blackbox/ha.rs, scripts/ha-cluster.sh): Debian's Patroni and
# etcd (and the HAProxy above) around three PostgreSQL 15 nodes.
if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then
  echo "patroni, etcd: apt-get install -y patroni etcd-server haproxy"
  if [[ "$(id -u)" == 0 ]]; then
    apt-get install -y patroni etcd-server haproxy
  else
    sudo apt-get install -y patroni etcd-server haproxy
  fi
fi
echo "patroni: $(patroni --version 2>/dev/null || echo missing); etcd: $(etcd --version 2>/dev/null | head -1 || echo missing)"

# The OpenAPI document (tests/blackbox/openapi.rs): PyPI openapi-spec-validator 0.7.2 (validates
# docs/openapi.json) and schemathesis 4.32.5 (property-based tests of every route against a real
# server), in one venv; its jsonschema also checks SSE events against the document's schemas.
oa="$here/openapi"
oa_pins=("schemathesis==4.32.5" "openapi-spec-validator==0.7.2")
pip_venv openapi "$oa" "${oa_pins[@]}"
"$oa/.venv/bin/st" --version && "$oa/.venv/bin/openapi-spec-validator" --help >/dev/null && echo "openapi: ok"

# MCP (tests/blackbox/mcp.rs): the reference server @modelcontextprotocol/server-everything
# 2026.8.31 (stdio and Streamable HTTP), and PyPI mcp 2.3.0 (the Python SDK) in mcp/.venv for the
# small servers the failure tests write.
mcp="$here/mcp"
everything_version=2026.8.31
if [[ -f "$mcp/node_modules/.package-lock.json" && "$mcp/node_modules/.package-lock.json" -nt "$mcp/package-lock.json" ]] &&
  [[ "$(cd "$mcp" && node -p "require('@modelcontextprotocol/server-everything/package.json').version" 2>/dev/null)" == "$everything_version" ]]; then
  echo "mcp: already installed"
else
  echo "mcp: npm ci"
  (cd "$mcp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
(cd "$mcp" && node -e "
  const v = require('@modelcontextprotocol/server-everything/package.json').version;
  if (v !== '$everything_version') { console.error('expected server-everything $everything_version, got ' + v); process.exit(1); }
  console.log('server-everything ' + v + ': ok');
")
mcp_sdk_version=2.3.0
pip_venv "mcp (PyPI)" "$mcp" "mcp==$mcp_sdk_version"
"$mcp/.venv/bin/python" -c "from mcp.server.mcpserver import MCPServer" && echo "mcp (PyPI) $mcp_sdk_version: ok"

# Codegen from the document (tests/blackbox/openapi.rs): npm openapi-typescript 7.13.0 writes
# TypeScript types from docs/openapi.json, and typescript 5.9.3 (the web page's) checks a small
# client against them.
ots="$here/openapi-ts"
if [[ -f "$ots/node_modules/.package-lock.json" && "$ots/node_modules/.package-lock.json" -nt "$ots/package-lock.json" ]] &&
  [[ "$(cd "$ots" && node -p "require('openapi-typescript/package.json').version" 2>/dev/null)" == "7.13.0" ]]; then
  echo "openapi-ts: already installed"
else
  echo "openapi-ts: npm ci"
  (cd "$ots" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
(cd "$ots" && node -e "
  const v = require('openapi-typescript/package.json').version, t = require('typescript/package.json').version;
  if (v !== '7.13.0' || t !== '5.9.3') { console.error('expected openapi-typescript 7.13.0 and typescript 5.9.3, got ' + v + ' and ' + t); process.exit(1); }
  console.log('openapi-ts: ok');
")

# Prometheus (tests/blackbox/metrics.rs): PyPI prometheus-client 0.26.0, whose text-format parser
# (the one its own tooling uses) reads what GET /metrics serves; prometheus/parse.py prints it as
# JSON for the test.
prom="$here/prometheus"
prom_version=0.26.0
pip_venv prometheus "$prom" "prometheus-client==$prom_version"
"$prom/.venv/bin/python" -c "from prometheus_client.parser import text_string_to_metric_families" &&
  echo "prometheus (PyPI) $prom_version: ok"

# The Parquet export (tests/blackbox/parquet_export.rs): PyPI duckdb 2.0.0 runs the analysts' SQL
# over the exported files, and pyarrow 26.0.1 reads their schemas and hive partitions;
# analytics/query.py drives both.
an="$here/analytics"
an_pins=("duckdb==2.0.0" "pyarrow==26.0.1")
pip_venv analytics "$an" "${an_pins[@]}"
"$an/.venv/bin/python" -c "import duckdb, pyarrow.parquet" && echo "analytics (PyPI) duckdb, pyarrow: ok"

# The change feed (tests/blackbox/change_feed.rs): PyPI nats-py 2.16.0 runs the Python consumer
# of docs/integrations.md ("Subscribing with Python") as written, against the test's nats-server.
nats_py="$here/nats"
nats_py_version=2.16.0
pip_venv nats "$nats_py" "nats-py==$nats_py_version"
"$nats_py/.venv/bin/python" -c "import nats" && echo "nats (PyPI) nats-py $nats_py_version: ok"

# The AI SDK (tests/blackbox/ai_sdk.rs): npm `ai` 7.0.173, whose DefaultChatTransport,
# readUIMessageStream and uiMessageChunkSchema drive and check /api/chat (ai-sdk/chat.mjs). It
# declares Node 22 as its engine; the parts used here run on the machine's Node 20 (the test is the
# proof).
aisdk="$here/ai-sdk"
if [[ -f "$aisdk/node_modules/.package-lock.json" && "$aisdk/node_modules/.package-lock.json" -nt "$aisdk/package-lock.json" ]] &&
  [[ "$(cd "$aisdk" && node -p "require('ai/package.json').version" 2>/dev/null)" == "7.0.173" ]]; then
  echo "ai-sdk: already installed"
else
  echo "ai-sdk: npm ci"
  (cd "$aisdk" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --engine-strict=false)
fi
(cd "$aisdk" && node --input-type=module -e "
  import { DefaultChatTransport, readUIMessageStream, uiMessageChunkSchema } from 'ai';
  if (!DefaultChatTransport || !readUIMessageStream || !uiMessageChunkSchema) { console.error('ai lacks the chat client'); process.exit(1); }
  console.log('ai-sdk: ok (ai 7.0.173)');
")

# docs/integrations.md's useChat page as written (tests/blackbox/nextjs_chat.rs): a minimal
# Next.js app, next 16.4.6, react/react-dom 19.3.1, @ai-sdk/react 4.0.177 (which pins ai 7.0.173),
# typescript 5.9.3 for next build's type check, and playwright-core 1.64.1 driving Debian's
# Chromium (installed above). --ignore-scripts: next's SWC compiler is the prebuilt binary of its
# per-platform npm package (@next/swc-linux-x64-gnu), nothing needs an install script.
nextjs="$here/nextjs"
if [[ -f "$nextjs/node_modules/.package-lock.json" && "$nextjs/node_modules/.package-lock.json" -nt "$nextjs/package-lock.json" ]] &&
  [[ "$(cd "$nextjs" && node -p "require('next/package.json').version" 2>/dev/null)" == "16.4.6" ]]; then
  echo "nextjs: already installed"
else
  echo "nextjs: npm ci"
  (cd "$nextjs" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error --engine-strict=false)
fi
(cd "$nextjs" && node -e "
  const v = (p) => require(p + '/package.json').version;
  const want = { next: '16.4.6', react: '19.3.1', '@ai-sdk/react': '4.0.177', ai: '7.0.173' };
  for (const [p, w] of Object.entries(want)) {
    if (v(p) !== w) { console.error('expected ' + p + ' ' + w + ', got ' + v(p)); process.exit(1); }
  }
  console.log('nextjs: ok (next ' + v('next') + ', @ai-sdk/react ' + v('@ai-sdk/react') + ')');
")
