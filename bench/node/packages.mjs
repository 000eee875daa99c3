// The pinned @durable-streams packages, from tests/conformance/durable-streams/node_modules
// (installed by tests/conformance/install.sh), so the bench and the conformance suite use one copy.
import { createRequire } from "node:module"
import { dirname, join } from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

const here = dirname(fileURLToPath(import.meta.url))
const root =
  process.env.DS_PACKAGES_DIR ?? join(here, "../../tests/conformance/durable-streams")
const require = createRequire(join(root, "package.json"))

async function load(name) {
  let entry
  try {
    entry = require.resolve(name)
  } catch {
    console.error(
      `${name} is not installed under ${root}: run \`bash tests/conformance/install.sh\``
    )
    process.exit(2)
  }
  // The packages' CommonJS entry; the ESM one is beside it.
  const esm = entry.replace(/index\.cjs$/, "index.js")
  return import(pathToFileURL(esm).href)
}

export const client = () => load("@durable-streams/client")
export const server = () => load("@durable-streams/server")
export const version = (name) => require(`${name}/package.json`).version
