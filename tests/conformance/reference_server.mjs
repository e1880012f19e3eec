// Start the @durable-streams/server reference server in FILE-BACKED mode.
//
//   node tests/conformance/reference_server.mjs <port> <dataDir> [host]
//
// Prints one ready line: "DS_REFERENCE_SERVER_READY <baseUrl> dataDir=<dir>"
// and runs until SIGINT/SIGTERM. Port 0 picks a free port (see ready line).
import { mkdirSync } from "node:fs"
import { resolve } from "node:path"
import { DurableStreamTestServer } from "@durable-streams/server"

const [portArg, dataDirArg, hostArg] = process.argv.slice(2)
if (portArg === undefined || !dataDirArg) {
  console.error("usage: node reference_server.mjs <port> <dataDir> [host]")
  process.exit(2)
}
const port = Number(portArg)
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`invalid port: ${portArg}`)
  process.exit(2)
}
const dataDir = resolve(dataDirArg)
mkdirSync(dataDir, { recursive: true })

const server = new DurableStreamTestServer({
  port,
  host: hostArg ?? "127.0.0.1",
  dataDir, // dataDir => FileBackedStreamStore (LMDB metadata + append-only logs)
})

const url = await server.start()
console.log(`DS_REFERENCE_SERVER_READY ${url} dataDir=${dataDir}`)

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
