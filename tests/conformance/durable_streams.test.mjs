// Durable Streams protocol conformance suite (public package
// @durable-streams/server-conformance-tests, pinned in package.json).
//
// Target server is taken from the environment:
//   DS_BASE_URL               required, e.g. http://127.0.0.1:4437 (the suite
//                             appends /v1/stream/... itself)
//   DS_LONG_POLL_TIMEOUT_MS   optional, server long-poll timeout the suite should
//                             allow for (package default: 20000)
//   DS_SUBSCRIPTIONS=1        optional, also run the "Reserved subscription
//                             APIs" group (off by default, as in the package)
//
// Run via tests/conformance/run.sh <baseUrl> <json-report-path>.
import { runConformanceTests } from "@durable-streams/server-conformance-tests"

const baseUrl = process.env.DS_BASE_URL
if (!baseUrl) {
  throw new Error(
    "DS_BASE_URL is required (use tests/conformance/run.sh <baseUrl> <report.json>)"
  )
}

const options = { baseUrl: baseUrl.replace(/\/+$/, "") }
if (process.env.DS_LONG_POLL_TIMEOUT_MS) {
  options.longPollTimeoutMs = Number(process.env.DS_LONG_POLL_TIMEOUT_MS)
}
if (["1", "true", "yes"].includes((process.env.DS_SUBSCRIPTIONS ?? "").toLowerCase())) {
  options.subscriptions = true
}

runConformanceTests(options)
