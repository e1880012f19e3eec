#!/usr/bin/env bash
# Run the Durable Streams conformance suite against a server.
#
#   tests/conformance/run.sh <baseUrl> <json-report-path> [vitest args, e.g. -t <pattern>]
#
# e.g. tests/conformance/run.sh http://127.0.0.1:4437 /tmp/ds-conformance.json
# Exit status is vitest's (0 = all tests passed).
# Optional env: DS_LONG_POLL_TIMEOUT_MS, DS_SUBSCRIPTIONS=1 (see durable_streams.test.mjs);
# DS_CONFORMANCE_CONFIG=<vitest config> (default tests/conformance/vitest.config.mjs, our 60 s
# test timeout; tests/conformance/vitest.defaults.config.mjs keeps vitest's defaults).
set -uo pipefail

if [ "$#" -lt 2 ]; then
  echo "usage: $0 <baseUrl> <json-report-path> [vitest args]" >&2
  exit 2
fi

base_url="$1"
report="$2"
shift 2
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

mkdir -p "$(dirname "$report")"
case "$report" in
  /*) ;;
  *) report="$PWD/$report" ;;
esac

cd "$repo_root" || exit 2
DS_BASE_URL="$base_url" npx --no-install vitest run \
  --config "${DS_CONFORMANCE_CONFIG:-tests/conformance/vitest.config.mjs}" \
  --reporter=default --reporter=json --outputFile.json="$report" "$@"
exit $?
