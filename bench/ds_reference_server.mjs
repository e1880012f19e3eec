// The @durable-streams/server reference server for bench/bench_durable.py, in either mode:
//
//   node bench/ds_reference_server.mjs <port> file <dataDir> [host]   file-backed (LMDB + logs)
//   node bench/ds_reference_server.mjs <port> memory [host]           in-memory StreamStore
//
// Prints one ready line: "DS_REFERENCE_SERVER_READY <baseUrl> mode=<file|memory> [dataDir=<dir>]"
// and runs until SIGINT/SIGTERM. Port 0 picks a free port (see the ready line). Server options
// are the package defaults (response compression on, 30 s long-poll timeout), as the upstream
// benchmark (@durable-streams/benchmarks) sees the server.
import { mkdirSync } from "node:fs"
import { resolve } from "node:path"
import { DurableStreamTestServer } from "@durable-streams/server"

const args = process.argv.slice(2)
const [portArg, mode] = args
const usage = "usage: node ds_reference_server.mjs <port> file <dataDir> [host] | <port> memory [host]"
if (portArg === undefined || (mode !== "file" && mode !== "memory")) {
  console.error(usage)
  process.exit(2)
}
const port = Number(portArg)
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`invalid port: ${portArg}`)
  process.exit(2)
}
let dataDir
let host
if (mode === "file") {
  if (!args[2]) {
    console.error(usage)
    process.exit(2)
  }
  dataDir = resolve(args[2])
  mkdirSync(dataDir, { recursive: true })
  host = args[3]
} else {
  host = args[2]
}

const server = new DurableStreamTestServer({
  port,
  host: host ?? "127.0.0.1",
  ...(dataDir ? { dataDir } : {}), // no dataDir => in-memory StreamStore
})

const url = await server.start()
console.log(
  `DS_REFERENCE_SERVER_READY ${url} mode=${mode}${dataDir ? ` dataDir=${dataDir}` : ""}`
)

let stopping = false
async function shutdown(signal) {
  if (stopping) return
  stopping = true
  try {
    await server.stop()
  } catch (err) {
    console.error(`error during shutdown (${signal}):`, err)
    process.exitCode = 1
  }
  process.exit()
}
process.on("SIGINT", () => shutdown("SIGINT"))
process.on("SIGTERM", () => shutdown("SIGTERM"))
