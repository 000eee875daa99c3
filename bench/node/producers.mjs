// Append load with the real client: N concurrent IdempotentProducers (@durable-streams/client),
// each writing JSON values to a stream of its own for a fixed time, then every stream read back
// and checked (every value, once, in order). Prints one JSON object on stdout.
//
// Usage: node producers.mjs --url http://host:port --producers 100 --seconds 10 --batch 10
//        [--rate values-per-second] [--prefix name] [--max-in-flight 5] [--linger-ms 5]
//
// Each producer runs the client's defaults (lingerMs 5, maxInFlight 5, epoch 0) except
// maxBatchBytes, set to exactly `batch` values (every value has the same length), so each
// request carries `batch` values on either server whatever the timing.
//
// Without --rate the load is closed-loop: a producer appends a batch, and when maxInFlight
// batches are in flight waits for them (`flush()`), so at most maxInFlight requests per producer
// are out at once and the rate is whatever the client and server reach.
//
// With --rate R the load is open-loop at a fixed offered rate: R values/s in all, each producer
// R / producers values/s, i.e. one batch every batch × producers / R seconds on a timer of its
// own (to absolute due times, so a late timer does not shift the ones after it; the producers'
// first due times are spread evenly over one interval). A due batch is appended whatever is in
// flight (the client queues it behind its maxInFlight). When the time is up every producer
// flushes; `seconds` is the time to the last acknowledgement, and how late the timers fired (the
// client's event-loop lag) is reported beside it.
//
// The measured phase is bracketed by the lines `phase start` and `phase end` on stdout (stream
// creation before it, the read-back check after it), so the caller can measure CPU over exactly
// the phase; the last line is the JSON result.
import { parseArgs } from "node:util"
import { client, version } from "./packages.mjs"

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    producers: { type: "string", default: "100" },
    seconds: { type: "string", default: "10" },
    batch: { type: "string", default: "10" },
    rate: { type: "string" },
    prefix: { type: "string", default: "bench-append" },
    "max-in-flight": { type: "string", default: "5" },
    "linger-ms": { type: "string", default: "5" },
  },
})
const base = args.url.replace(/\/$/, "")
const producers = Number(args.producers)
const seconds = Number(args.seconds)
const batch = Number(args.batch)
const maxInFlight = Number(args["max-in-flight"])
const lingerMs = Number(args["linger-ms"])
const rate = args.rate === undefined ? null : Number(args.rate)
if (rate !== null && !(rate > 0)) {
  console.error(`--rate must be a positive number of values per second, not ${args.rate}`)
  process.exit(2)
}
const { DurableStream, IdempotentProducer } = await client()

// A token-stream-like value of fixed length (JSON numbers cannot be zero-padded, so the index is
// a zero-padded string): producer, index, a token.
const value = (p, i) => `{"p":${p},"i":"${String(i).padStart(9, "0")}","delta":"token"}`
const valueBytes = (p) => Buffer.byteLength(value(p, 0))

// Every request the producers make, by status, and each POST's latency (ms).
const statuses = {}
const latencies = []
const countingFetch = async (input, init) => {
  const t0 = performance.now()
  const resp = await fetch(input, init)
  if (init?.method === "POST") latencies.push(performance.now() - t0)
  statuses[resp.status] = (statuses[resp.status] ?? 0) + 1
  return resp
}

const url = (p) => `${base}/v1/stream/${args.prefix}-${p}`
const streams = []
for (let p = 0; p < producers; p++) {
  streams.push(
    await DurableStream.create({ url: url(p), contentType: "application/json" })
  )
}

const errors = []
const sent = new Array(producers).fill(0)
// Open-loop: ms between a producer's batches, and how late each timer fired (ms).
const interval = rate === null ? null : (batch * producers * 1000) / rate
const lateness = []
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const cpu0 = process.cpuUsage()
console.log("phase start")
const t0 = performance.now()
const deadline = t0 + seconds * 1000
await Promise.all(
  streams.map(async (stream, p) => {
    const producer = new IdempotentProducer(stream, `producer-${p}`, {
      epoch: 0,
      lingerMs,
      maxInFlight,
      maxBatchBytes: batch * valueBytes(p),
      fetch: countingFetch,
      onError: (e) => errors.push(String(e)),
    })
    if (interval === null) {
      while (performance.now() < deadline) {
        for (let k = 0; k < batch; k++) producer.append(value(p, sent[p]++))
        if (producer.inFlightCount >= maxInFlight) await producer.flush()
      }
    } else {
      const first = t0 + (p * interval) / producers
      for (let k = 0; ; k++) {
        const due = first + k * interval
        if (due >= deadline) break
        const wait = due - performance.now()
        if (wait > 0) await sleep(wait)
        lateness.push(performance.now() - due)
        // The batch's last value fills maxBatchBytes: the client sends it at once.
        for (let j = 0; j < batch; j++) producer.append(value(p, sent[p]++))
      }
    }
    await producer.flush()
    await producer.detach()
  })
)
const elapsed = (performance.now() - t0) / 1000
const cpu = process.cpuUsage(cpu0)
console.log("phase end")
const values = sent.reduce((a, b) => a + b, 0)

// Read every stream back (plain fetch, offset -1, following Stream-Next-Offset until
// Stream-Up-To-Date) and check it holds exactly what its producer sent, in order.
let verified = 0
const problems = []
for (let p = 0; p < producers; p++) {
  let offset = "-1"
  let next = 0
  for (;;) {
    const resp = await fetch(`${url(p)}?offset=${offset}`)
    if (resp.status !== 200) {
      problems.push(`stream ${p}: read answered ${resp.status}`)
      break
    }
    const items = await resp.json()
    for (const item of items) {
      if (item.p !== p || Number(item.i) !== next) {
        if (problems.length < 10)
          problems.push(`stream ${p}: value ${next} is ${JSON.stringify(item)}`)
        next = -1
        break
      }
      next++
    }
    if (next < 0) break
    offset = resp.headers.get("stream-next-offset")
    if (resp.headers.get("stream-up-to-date") === "true") break
  }
  if (next === sent[p]) verified++
  else if (next >= 0) problems.push(`stream ${p}: read ${next} values of ${sent[p]} sent`)
}

latencies.sort((a, b) => a - b)
lateness.sort((a, b) => a - b)
const quantile = (v, q) => v[Math.min(v.length - 1, Math.max(0, Math.ceil(q * v.length) - 1))]
const pick = (q) => quantile(latencies, q)
console.log(
  JSON.stringify({
    client: `@durable-streams/client ${version("@durable-streams/client")}`,
    producers,
    batch_values: batch,
    value_bytes: valueBytes(0),
    linger_ms: lingerMs,
    max_in_flight: maxInFlight,
    values,
    seconds: elapsed,
    offered_values_per_s: rate,
    interval_ms: interval,
    phase_seconds: seconds,
    timer_late_ms: lateness.length
      ? {
          p50: quantile(lateness, 0.5),
          p99: quantile(lateness, 0.99),
          max: lateness[lateness.length - 1],
        }
      : null,
    client_cpu_ms: { user: cpu.user / 1000, system: cpu.system / 1000 },
    posts: latencies.length,
    statuses,
    post_ms: latencies.length
      ? { p50: pick(0.5), p99: pick(0.99), max: latencies[latencies.length - 1] }
      : null,
    errors: errors.slice(0, 10),
    error_count: errors.length,
    streams_verified: verified,
    problems,
  })
)
