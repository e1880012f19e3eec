// Vitest config for the Durable Streams conformance harness only.
// Used by tests/conformance/run.sh; not part of the Python (pytest) suite.
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const here = fileURLToPath(new URL(".", import.meta.url))

export default defineConfig({
  test: {
    root: here,
    include: ["durable_streams.test.mjs"],
    environment: "node",
    // The suite talks to one external server; its long-poll/SSE tests wait on
    // real timeouts, so keep per-test timeouts generous.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    passWithNoTests: false,
    watch: false,
  },
})
