// Vitest config for the Durable Streams conformance harness, with vitest's default timeouts
// (5 s per test, 10 s per hook): the suite as a user running the package's own CLI sees it
// (`npx @durable-streams/server-conformance-tests --run <url>` passes no timeout either).
// Used by tests/conformance/run.sh when DS_CONFORMANCE_CONFIG points here
// (tests/e2e/test_ds_conformance.py, bench/bench_conformance.py).
import { fileURLToPath } from "node:url"
import { defineConfig } from "vitest/config"

const here = fileURLToPath(new URL(".", import.meta.url))

export default defineConfig({
  test: {
    root: here,
    include: ["durable_streams.test.mjs"],
    environment: "node",
    passWithNoTests: false,
    watch: false,
  },
})
