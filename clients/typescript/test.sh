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
#
# Then the README's install, as written there: this folder (without
# node_modules and dist) is copied to a temp dir outside the repository, a
# fresh project in another temp dir runs the README's Install commands
# against the copy, and a script there imports the installed client and
# checkpoints and reads back against a real sidecar.
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
install_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-install-XXXXXX")"
trap 'rm -rf "$security_dir" "$install_dir"' EXIT
../../scripts/make-test-pki "$security_dir" spiffe://stepwell.test/typescript-client
echo "== pass 2: TLS with client certificates and token auth"
STEPWELL_TEST_SECURITY_DIR="$security_dir" node --test dist/test/scenarios.test.js dist/test/secure-checks.js

echo "== pass 3: the README's install in a fresh project outside the repository"
# The commands between the sh fence of README.md's "## Install" section.
install_cmds="$(awk '/^## Install/{s=1; next} s && /^## /{exit} s && /^```sh/{f=1; next} f && /^```/{exit} f' README.md)"
if [ "$(printf '%s\n' "$install_cmds" | grep -c .)" -ne 2 ]; then
  echo "README.md: expected two install commands, found: $install_cmds" >&2
  exit 1
fi
mkdir "$install_dir/stepwell" "$install_dir/stepwell/clients" "$install_dir/app"
copy="$install_dir/stepwell/clients/typescript"
mkdir "$copy"
tar --exclude=./node_modules --exclude=./dist --exclude='./*.tgz' -cf - . | tar -xf - -C "$copy"
printf '{ "name": "fresh-app", "version": "1.0.0", "private": true, "type": "module" }\n' >"$install_dir/app/package.json"
cat >"$install_dir/app/app.js" <<'JS'
import { pathToFileURL } from "node:url";
import { StepwellClient, StepwellDurableExecutor } from "@stepwell/client";

const { startSidecar } = await import(pathToFileURL(process.env.STEPWELL_TEST_SIDECAR_MODULE).href);
const sidecar = await startSidecar();
const client = new StepwellClient({ target: sidecar.target, namespace: `fresh-app-${process.pid}` });
try {
  const executor = new StepwellDurableExecutor(client);
  await executor.checkpoint({ turnId: "t1", sessionId: "s1", phase: "started", state: { step: 1 }, timestamp: new Date().toISOString() });
  const restored = await executor.restore("t1");
  if (restored.length !== 1 || restored[0].state.step !== 1) throw new Error(`restore: ${JSON.stringify(restored)}`);
  const receipt = await client.once("t1/charge", async () => ({ charged: true }));
  if (!receipt.charged) throw new Error(`once: ${JSON.stringify(receipt)}`);
  console.log("fresh app: checkpointed, restored and ran once through the installed client");
} finally {
  client.close();
  await sidecar.stop();
}
JS
(
  cd "$install_dir/app"
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error
  # Line by line; the app's install with engine-strict, so a runtime
  # dependency that refuses this Node fails here (the first line's generator
  # tools, protoc-gen-es and google-proto-files, declare Node >=22 and only warn).
  while IFS= read -r cmd; do
    cmd="${cmd//\/path\/to\/stepwell/$install_dir/stepwell}"
    echo "+ $cmd"
    case "$cmd" in
      "npm install "*) npm_config_engine_strict=true bash -euo pipefail -c "$cmd" ;;
      *) bash -euo pipefail -c "$cmd" ;;
    esac
  done <<<"$install_cmds"
  test ! -L node_modules/@stepwell/client  # a copy, not a link into the checkout
  test -f node_modules/@stepwell/client/dist/src/index.js
  test -d node_modules/@connectrpc/connect-node
)
STEPWELL_TEST_SIDECAR_MODULE="$PWD/dist/test/sidecar.js" node "$install_dir/app/app.js"
