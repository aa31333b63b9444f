#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests (node's built-in runner)
# against the real sidecar: STEPWELL_BIN, default
# ${CARGO_TARGET_DIR:-/root/.cache/stepwell/target}/debug/stepwell.
# Works from any directory.
#
# Two passes: every test against a plaintext sidecar, then the shared
# scenarios and test/secure-checks.ts against a sidecar serving TLS with
# client certificates and bearer-token auth, from a throwaway CA,
# certificates, tokens and auth file made by scripts/make-test-pki.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@connectrpc/connect-node ] || [ ! -x node_modules/.bin/tsc ] || [ package.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund
fi
rm -rf dist
npx --no-install tsc -p .

echo "== pass 1: plaintext sidecar"
node --test dist/test/*.test.js

security_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-tls-XXXXXX")"
trap 'rm -rf "$security_dir"' EXIT
../../scripts/make-test-pki "$security_dir" spiffe://stepwell.test/typescript-client
echo "== pass 2: TLS with client certificates and token auth"
STEPWELL_TEST_SECURITY_DIR="$security_dir" node --test dist/test/scenarios.test.js dist/test/secure-checks.js
