#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests (node's built-in runner)
# against the real sidecar: STEPWELL_BIN, default
# ${CARGO_TARGET_DIR:-/root/.cache/stepwell/target}/debug/stepwell.
# Works from any directory.
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/@connectrpc/connect-node ] || [ ! -x node_modules/.bin/tsc ] || [ package.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund
fi
rm -rf dist
npx --no-install tsc -p .
node --test dist/test/*.test.js
