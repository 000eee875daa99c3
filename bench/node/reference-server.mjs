// The reference Durable Streams server, @durable-streams/server's DurableStreamTestServer,
// file-backed (LMDB metadata + append-only segment files) in the given data directory.
// Usage: node reference-server.mjs <dataDir> [--until-stdin-closes]; prints `listening on http://…`
// once it listens and stops cleanly on SIGTERM (and, with the flag, when stdin closes: the bench
// holds a pipe, so the server never outlives it).
import { server, version } from "./packages.mjs"

const dataDir = process.argv[2]
if (!dataDir) {
  console.error("usage: node reference-server.mjs <dataDir>")
  process.exit(2)
}
const { DurableStreamTestServer } = await server()
const s = new DurableStreamTestServer({ port: 0, host: "127.0.0.1", dataDir })
const url = await s.start()
console.log(`@durable-streams/server ${version("@durable-streams/server")} listening on ${url}`)
let stopping = false
const stop = async () => {
  if (stopping) return
  stopping = true
  await s.stop()
  process.exit(0)
}
process.on("SIGTERM", stop)
process.on("SIGINT", stop)
if (process.argv.includes("--until-stdin-closes")) {
  process.stdin.on("end", stop)
  process.stdin.resume()
}
