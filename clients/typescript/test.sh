#!/usr/bin/env bash
# Builds the TypeScript client and runs its tests (node's built-in runner)
# against the real sidecar: STEPWELL_BIN, default
# ${CARGO_TARGET_DIR:-/root/.cache/stepwell/target}/debug/stepwell.
# Works from any directory.
#
# The worker scenarios (wait_*) signal through a peer, another language's
# scenario worker: STEPWELL_SCENARIO_PEER, by default the Go client's,
# built here with go build. They run on a plaintext sidecar of their own in
# both passes: a worker is given a target and nothing else.
#
# Two passes: every test against a plaintext sidecar, then the shared
# scenarios, test/secure-checks.ts and test/connection-lost.test.ts against a sidecar serving TLS with
# client certificates and bearer-token auth, from a throwaway CA,
# certificates, tokens and auth file made by scripts/make-test-pki.
#
# Then the README's install, as written there: this folder (without
# node_modules and dist) is copied to a temp dir outside the repository, and
# a fresh project in another temp dir runs the README's one Install command
# against the copy with engine-strict on (npm links the folder, and the
# client's prepare script installs its locked dependencies there and builds
# it). Scripts there then use the installed client from an ES module
# (import) and from CommonJS (require), checkpointing and reading back
# against a real sidecar, and a TypeScript file is type-checked against the
# installed declarations. test/installed/durable-executor-contract.test.ts,
# the DurableExecutor contract's tests, is compiled there against the
# installed declarations and run on the installed client against real
# sidecars (one of them killed and started again). Last, the README's allowScripts entry lets the
# install build under strict-allow-scripts, and `npm install --install-links`
# of the copy and of the tarball `npm pack` makes of it each install a real
# copy that import and require load. Fresh projects also install the client
# with LangGraph.js, and with the OpenAI Agents SDK, as the README's sections
# say, and run each section's example against a sidecar. Every npm install
# line of docs/guides/*.md runs in a fresh project of its own too, which then
# loads the guide's imports of the client; no line in the guides or the
# README may name @stepwell/ as a registry package (it is not published).
#
# Usage: clients/typescript/test.sh [--only PART[,PART...] [SPEC FILTER...]]
# The parts: unit (passes 1 and 2 under node's runner), specs (the Vitest
# specs), install (passes 3 and 4); all three by default. The test command
# runs them as lanes of their own, side by side (scripts/test); ./build
# makes dist/ once for all of them. SPEC FILTERs, after the parts, choose
# which spec files Vitest runs (by path: langgraph, agents, adk...).
set -euo pipefail
parts=unit,specs,install
if [ "${1:-}" = --only ]; then
  parts="${2:?--only needs a part: unit, specs or install}"
  shift 2
fi
for part in ${parts//,/ }; do
  case "$part" in
    unit | specs | install) ;;
    *) echo "clients/typescript/test.sh: unknown part $part (unit, specs, install)" >&2; exit 2 ;;
  esac
done
# Whether PART is among those to run.
runs() { [[ ",$parts," == *",$1,"* ]]; }
cd "$(dirname "$0")"
./build

peer_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-peer-XXXXXX")"
security_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-tls-XXXXXX")"
install_dir="$(mktemp -d "${TMPDIR:-/tmp}/stepwell-ts-install-XXXXXX")"
trap 'rm -rf "$peer_dir" "$security_dir" "$install_dir"' EXIT
# The worker scenarios signal through another language's scenario worker
# (clients/scenarios/README.md): the Go client's, built here. An
# STEPWELL_SCENARIO_PEER already set is used as it is.
if runs unit && [ -z "${STEPWELL_SCENARIO_PEER:-}" ]; then
  (cd ../go && go build -o "$peer_dir/scenarioworker" ./examples/scenarioworker)
  export STEPWELL_SCENARIO_PEER="$peer_dir/scenarioworker"
fi

if runs unit; then
  echo "== pass 1: plaintext sidecar"
  node --test dist/test/*.test.js
  ../../scripts/make-test-pki "$security_dir" spiffe://stepwell.test/typescript-client
  echo "== pass 2: TLS with client certificates and token auth"
  STEPWELL_TEST_SECURITY_DIR="$security_dir" node --test dist/test/scenarios.test.js dist/test/secure-checks.js dist/test/connection-lost.test.js
fi

if runs specs; then
  echo "== specs: the LangGraph saver, the OpenAI Agents session and the Google ADK session service (Vitest: the official validator and their specs) on SQLite and on a throwaway Postgres"
  # ../../scripts/with-postgres starts the cluster (or uses STEPWELL_TEST_POSTGRES_URL);
  # every spec runs on both stores and fails, never skips, without one.
  # The cross-language specs drive the Python saver, session and ADK session
  # service through the Python client's test venv, with LangGraph,
  # openai-agents and google-adk. ../python/venv makes it, or waits under its
  # lock while the Python lane makes it, so these specs never run on a
  # half-made venv.
  if [ -z "${STEPWELL_TEST_PYTHON:-}" ]; then
    STEPWELL_TEST_PYTHON="$(../python/venv)"
fi
export STEPWELL_TEST_PYTHON
(cd ../.. && scripts/with-postgres env -C "$OLDPWD" node node_modules/vitest/vitest.mjs run "$@")
fi

runs install || exit 0
echo "== pass 3: the README's install in a fresh project outside the repository"
# The command between the sh fence of README.md's "## Install" section.
install_cmds="$(awk '/^## Install/{s=1; next} s && /^## /{exit} s && /^```sh/{f=1; next} f && /^```/{exit} f' README.md)"
if [ "$(printf '%s\n' "$install_cmds" | grep -c .)" -ne 1 ]; then
  echo "README.md: expected one install command, found: $install_cmds" >&2
  exit 1
fi
mkdir "$install_dir/stepwell" "$install_dir/stepwell/clients" "$install_dir/app"
copy="$install_dir/stepwell/clients/typescript"
mkdir "$copy"
# A clean copy: no node_modules, dist or tarballs.
tar --exclude=./node_modules --exclude=./dist --exclude='./*.tgz' -cf - . | tar -xf - -C "$copy"
test ! -e "$copy/node_modules" && test ! -e "$copy/dist"
printf '{ "name": "fresh-app", "version": "1.0.0", "private": true, "type": "module" }\n' >"$install_dir/app/package.json"
cat >"$install_dir/app/app.js" <<'JS'
// ES module consumer: checkpoint, restore and once through the installed client.
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
  console.log("fresh app (import): checkpointed, restored and ran once through the installed client");
} finally {
  client.close();
  await sidecar.stop();
}
JS
cat >"$install_dir/app/app.cjs" <<'JS'
// CommonJS consumer: require() gets the CommonJS build; checkpoint and latest through it.
const { StepwellClient, StepwellDurableExecutor, StepwellError } = require("@stepwell/client");
const { pathToFileURL } = require("node:url");

(async () => {
  if (!require.resolve("@stepwell/client").includes("/dist/cjs/")) throw new Error(`require resolved ${require.resolve("@stepwell/client")}`);
  const { startSidecar } = await import(pathToFileURL(process.env.STEPWELL_TEST_SIDECAR_MODULE).href);
  const sidecar = await startSidecar();
  const client = new StepwellClient({ target: sidecar.target, namespace: `fresh-app-cjs-${process.pid}` });
  try {
    const executor = new StepwellDurableExecutor(client);
    await executor.checkpoint({ turnId: "t2", sessionId: "s2", phase: "started", state: { step: 2 }, timestamp: new Date().toISOString() });
    const newest = await client.latest("t2");
    if (!newest || newest.phase !== "started") throw new Error(`latest: ${JSON.stringify(newest)}`);
    try {
      await client.checkpoint({ turnId: "", phase: "x", state: {}, timestamp: new Date().toISOString() });
      throw new Error("an empty turn id was accepted");
    } catch (err) {
      if (!(err instanceof StepwellError) || err.code !== "INVALID_ARGUMENT") throw err;
    }
    console.log("fresh app (require): checkpointed and read back through the CommonJS build");
  } finally {
    client.close();
    await sidecar.stop();
  }
})().catch((err) => {
  console.error(err);
  process.exit(1);
});
JS
cat >"$install_dir/app/consumer.ts" <<'TS'
// TypeScript consumer, type-checked (tsc --noEmit) against the installed declarations.
import { StepwellClient, StepwellDurableExecutor, type DurableExecutor, type TurnCheckpoint, StepwellError } from "@stepwell/client";

const client = new StepwellClient({ target: "127.0.0.1:50051", namespace: "app" });
const executor: DurableExecutor = new StepwellDurableExecutor({ client });
export async function resume(turnId: string): Promise<TurnCheckpoint | undefined> {
  const all: TurnCheckpoint[] = await executor.restore(turnId);
  return all.at(-1);
}
export function reasonOf(err: unknown): string | undefined {
  return err instanceof StepwellError ? err.reason : undefined;
}
// @ts-expect-error: phase must be a string
void executor.checkpoint({ turnId: "t", sessionId: "s", phase: 1, state: {}, timestamp: "" });
TS
cat >"$install_dir/app/consumer-cjs.cts" <<'TS'
// CommonJS TypeScript consumer: require() of the client resolves the declarations of its CommonJS build.
import stepwell = require("@stepwell/client");

export const executor: stepwell.DurableExecutor = new stepwell.StepwellDurableExecutor({ clientOptions: "127.0.0.1:50051" });
export const code: string = new stepwell.StepwellError("x", { grpcCode: 14 }).code;
TS
# Connect's declarations need Node's types; the app borrows the client folder's @types/node rather than fetching its own
# (and skips checking libraries' own declarations, as tsc --init's config does).
printf '{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "lib": ["ES2022"], "strict": true, "skipLibCheck": true, "noEmit": true, "types": ["node"], "typeRoots": ["%s/node_modules/@types"] }, "files": ["consumer.ts", "consumer-cjs.cts"] }\n' "$PWD" >"$install_dir/app/tsconfig.json"
(
  cd "$install_dir/app"
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error npm_config_engine_strict=true
  cmd="${install_cmds//\/path\/to\/stepwell/$install_dir/stepwell}"
  echo "+ $cmd (engine-strict)"
  bash -euo pipefail -c "$cmd"
  test -f node_modules/@stepwell/client/dist/src/index.js
  test -f node_modules/@stepwell/client/dist/cjs/index.js
)
STEPWELL_TEST_SIDECAR_MODULE="$PWD/dist/test/sidecar.js" node "$install_dir/app/app.js"
STEPWELL_TEST_SIDECAR_MODULE="$PWD/dist/test/sidecar.js" node "$install_dir/app/app.cjs"
(cd "$install_dir/app" && node "$OLDPWD/node_modules/typescript/bin/tsc" -p tsconfig.json && echo "fresh app (TypeScript): consumer.ts (import) and consumer-cjs.cts (require) type-check against the installed declarations")

echo "== pass 3: the DurableExecutor contract, on the installed client"
cp test/installed/durable-executor-contract.test.ts "$install_dir/app/"
printf '{ "extends": "./tsconfig.json", "compilerOptions": { "noEmit": false, "outDir": "contract" }, "files": ["durable-executor-contract.test.ts"] }\n' >"$install_dir/app/tsconfig.contract.json"
(cd "$install_dir/app" && node "$OLDPWD/node_modules/typescript/bin/tsc" -p tsconfig.contract.json)
STEPWELL_TEST_SIDECAR_MODULE="$PWD/dist/test/sidecar.js" node --test "$install_dir/app/contract/durable-executor-contract.test.js"

echo "== pass 3: the README's LangGraph.js install and example, in a fresh project"
# The example the README shows is examples/langgraph-approval.mjs (after its
# three comment lines); the install command is the sh block of the section.
lg_section="$(awk '/^## Use stepwell with LangGraph.js/{s=1; next} s && /^## /{exit} s' README.md)"
lg_install="$(printf '%s\n' "$lg_section" | awk '/^```sh/{f=1; next} f && /^```/{exit} f')"
lg_example="$(printf '%s\n' "$lg_section" | awk '/<!-- langgraph-example: /{m=1; next} m && /^```js/{f=1; next} f && /^```/{exit} f')"
if [ "$lg_example" != "$(tail -n +4 examples/langgraph-approval.mjs)" ]; then
  echo "README.md's LangGraph.js example differs from examples/langgraph-approval.mjs" >&2
  exit 1
fi
(
  app="$install_dir/app-langgraph"
  mkdir "$app" && cd "$app"
  printf '{ "name": "fresh-langgraph-app", "version": "1.0.0", "private": true, "type": "module" }\n' >package.json
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error npm_config_engine_strict=true
  cmd="${lg_install//\/path\/to\/stepwell/$install_dir/stepwell}"
  echo "+ $cmd (engine-strict)"
  bash -euo pipefail -c "$cmd"
  test ! -L node_modules/@stepwell/client
  # One copy of LangGraph's checkpoint package: the app's, which the client's saver extends.
  test "$(find node_modules -path '*/@langchain/langgraph-checkpoint/package.json' | wc -l)" -eq 1
  cp "$OLDPWD/examples/langgraph-approval.mjs" .
  cat >run-example.mjs <<'JS'
// Runs the README's LangGraph.js example beside a sidecar of its own and checks what it prints.
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";
const { startSidecar } = await import(pathToFileURL(process.env.STEPWELL_TEST_SIDECAR_MODULE).href);
const sidecar = await startSidecar({ security: undefined });
try {
  const out = execFileSync(process.execPath, ["langgraph-approval.mjs"], { env: { ...process.env, STEPWELL_TARGET: sidecar.target }, encoding: "utf8" });
  if (out !== "ship A-17?\napproved\n") throw new Error(`the example printed ${JSON.stringify(out)}`);
  console.log("fresh app (LangGraph.js): the README's example paused at interrupt() and resumed through @stepwell/client/langgraph");
} finally {
  await sidecar.stop();
}
JS
  STEPWELL_TEST_SIDECAR_MODULE="$OLDPWD/dist/test/sidecar.js" node run-example.mjs
  node -e 'const { StepwellSaver, ThreadBusy } = require("@stepwell/client/langgraph"); const { BaseCheckpointSaver } = require("@langchain/langgraph-checkpoint"); if (!(StepwellSaver.fromAddress("127.0.0.1:1") instanceof BaseCheckpointSaver) || typeof ThreadBusy !== "function") process.exit(1)'
  cat >consumer.ts <<'TS'
// The subpath's declarations, type-checked against the installed packages.
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { StepwellSaver, ThreadBusy } from "@stepwell/client/langgraph";
export const saver: BaseCheckpointSaver = StepwellSaver.fromAddress("127.0.0.1:50051", { namespace: "agents", fenced: true, leaseMs: 10_000 });
export const busy = (err: unknown): string | undefined => (err instanceof ThreadBusy ? err.threadId : undefined);
// @ts-expect-error: the namespace is a string
StepwellSaver.fromAddress("127.0.0.1:50051", { namespace: 1 });
TS
  printf '{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "lib": ["ES2022"], "strict": true, "skipLibCheck": true, "noEmit": true, "types": ["node"], "typeRoots": ["%s/node_modules/@types"] }, "files": ["consumer.ts"] }\n' "$OLDPWD" >tsconfig.json
  node "$OLDPWD/node_modules/typescript/bin/tsc" -p tsconfig.json
  echo "fresh app (LangGraph.js): require() of the subpath and its TypeScript declarations work"
)

echo "== pass 3: the README's OpenAI Agents SDK install and example, in a fresh project"
# The example the README shows is examples/agents-approval.mjs (after its
# three comment lines); the install command is the sh block of the section.
ag_section="$(awk '/^## Use stepwell with the OpenAI Agents SDK/{s=1; next} s && /^## /{exit} s' README.md)"
ag_install="$(printf '%s\n' "$ag_section" | awk '/^```sh/{f=1; next} f && /^```/{exit} f')"
ag_example="$(printf '%s\n' "$ag_section" | awk '/<!-- agents-example: /{m=1; next} m && /^```js/{f=1; next} f && /^```/{exit} f')"
if [ "$ag_example" != "$(tail -n +4 examples/agents-approval.mjs)" ]; then
  echo "README.md's OpenAI Agents SDK example differs from examples/agents-approval.mjs" >&2
  exit 1
fi
(
  app="$install_dir/app-agents"
  mkdir "$app" && cd "$app"
  printf '{ "name": "fresh-agents-app", "version": "1.0.0", "private": true, "type": "module" }\n' >package.json
  # Not engine-strict: the SDK's openai 7 declares Node >= 22, while the
  # client (and this machine's CI) run on Node 20, where npm only warns.
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error
  cmd="${ag_install//\/path\/to\/stepwell/$install_dir/stepwell}"
  echo "+ $cmd"
  bash -euo pipefail -c "$cmd"
  test ! -L node_modules/@stepwell/client
  # One copy of the SDK's core: the app's, whose Session the client's session implements.
  test "$(find node_modules -path '*/@openai/agents-core/package.json' | wc -l)" -eq 1
  cp "$OLDPWD/examples/agents-approval.mjs" .
  cat >run-example.mjs <<'JS'
// Runs the README's OpenAI Agents SDK example beside a sidecar of its own and checks what it prints.
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";
const { startSidecar } = await import(pathToFileURL(process.env.STEPWELL_TEST_SIDECAR_MODULE).href);
const sidecar = await startSidecar({ security: undefined });
try {
  const out = execFileSync(process.execPath, ["agents-approval.mjs"], { env: { ...process.env, STEPWELL_TARGET: sidecar.target }, encoding: "utf8" });
  if (out !== 'approve ship({"order":"A-17"})?\nshipped A-17\n') throw new Error(`the example printed ${JSON.stringify(out)}`);
  console.log("fresh app (OpenAI Agents SDK): the README's example stopped for approval and resumed through @stepwell/client/agents");
} finally {
  await sidecar.stop();
}
JS
  STEPWELL_TEST_SIDECAR_MODULE="$OLDPWD/dist/test/sidecar.js" node run-example.mjs
  node -e 'const { StepwellSession, runOnce, RecordExists } = require("@stepwell/client/agents"); const s = StepwellSession.fromAddress("127.0.0.1:1", { sessionId: "x" }); s.close(); if (typeof runOnce !== "function" || typeof RecordExists !== "function") process.exit(1)'
  cat >consumer.ts <<'TS'
// The subpath's declarations, type-checked against the installed packages.
import type { Session } from "@openai/agents";
import { StepwellSession, runOnce } from "@stepwell/client/agents";
import { StepwellClient } from "@stepwell/client";
export const session: Session = StepwellSession.fromAddress("127.0.0.1:50051", { sessionId: "chat", namespace: "agents" });
export const execute = runOnce(new StepwellClient(), "chat", async (input: { n: number }) => input.n + 1);
export const perSession = runOnce(StepwellSession.fromAddress("127.0.0.1:50051", { sessionId: "chat" }), "chat", async (input: { n: number }) => input.n + 1, { leaseMs: 5_000 });
export const shared = runOnce(new StepwellClient(), "chat", async (input: { n: number }) => input.n, { session: (ctx) => String((ctx?.context as { sessionId: string }).sessionId) });
// @ts-expect-error: the session id is a string
StepwellSession.fromAddress("127.0.0.1:50051", { sessionId: 1 });
TS
  printf '{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "lib": ["ES2022", "DOM"], "strict": true, "skipLibCheck": true, "noEmit": true, "types": ["node"], "typeRoots": ["%s/node_modules/@types"] }, "files": ["consumer.ts"] }\n' "$OLDPWD" >tsconfig.json
  node "$OLDPWD/node_modules/typescript/bin/tsc" -p tsconfig.json
  echo "fresh app (OpenAI Agents SDK): require() of the subpath and its TypeScript declarations work"
)

echo "== pass 3: the README's Google ADK install and example, in a fresh project"
# The example the README shows is examples/adk-agent.mjs (after its three
# comment lines), and what it prints is the README's text block after it; the
# install command is the sh block of the section.
adk_section="$(awk '/^## Google ADK sessions/{s=1; next} s && /^## /{exit} s' README.md)"
adk_install="$(printf '%s\n' "$adk_section" | awk '/^```sh/{f=1; next} f && /^```/{exit} f')"
adk_example="$(printf '%s\n' "$adk_section" | awk '/<!-- adk-example: /{m=1; next} m && /^```js/{f=1; next} f && /^```/{exit} f')"
adk_output="$(printf '%s\n' "$adk_section" | awk '/<!-- adk-output -->/{m=1; next} m && /^```text/{f=1; next} f && /^```/{exit} f')"
if [ "$adk_example" != "$(tail -n +4 examples/adk-agent.mjs)" ]; then
  echo "README.md's Google ADK example differs from examples/adk-agent.mjs" >&2
  exit 1
fi
(
  app="$install_dir/app-adk"
  mkdir "$app" && cd "$app"
  printf '{ "name": "fresh-adk-app", "version": "1.0.0", "private": true, "type": "module" }\n' >package.json
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error npm_config_engine_strict=true
  cmd="${adk_install//\/path\/to\/stepwell/$install_dir/stepwell}"
  echo "+ $cmd (engine-strict)"
  bash -euo pipefail -c "$cmd"
  test ! -L node_modules/@stepwell/client
  # One copy of ADK: the app's, whose BaseSessionService the client's service extends.
  test "$(find node_modules -path '*/@google/adk/package.json' | wc -l)" -eq 1
  cp "$OLDPWD/examples/adk-agent.mjs" .
  printf '%s\n' "$adk_output" >expected-output.txt
  cat >run-example.mjs <<'JS'
// Runs the README's Google ADK example beside a sidecar of its own and checks that it prints the README's output.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
const { startSidecar } = await import(pathToFileURL(process.env.STEPWELL_TEST_SIDECAR_MODULE).href);
const sidecar = await startSidecar({ security: undefined });
try {
  const out = execFileSync(process.execPath, ["adk-agent.mjs"], { env: { ...process.env, STEPWELL_TARGET: sidecar.target }, encoding: "utf8" });
  if (out !== readFileSync("expected-output.txt", "utf8")) throw new Error(`the example printed ${JSON.stringify(out)}, not the README's output`);
  console.log("fresh app (Google ADK): the README's example ran an agent through @stepwell/client/adk and printed the README's output");
} finally {
  await sidecar.stop();
}
JS
  STEPWELL_TEST_SIDECAR_MODULE="$OLDPWD/dist/test/sidecar.js" node run-example.mjs
  node -e 'const { StepwellSessionService, StaleSessionError } = require("@stepwell/client/adk"); const { BaseSessionService } = require("@google/adk"); const s = StepwellSessionService.fromAddress("127.0.0.1:1"); s.close(); if (!(s instanceof BaseSessionService) || typeof StaleSessionError !== "function") process.exit(1)'
  cat >consumer.ts <<'TS'
// The subpath's declarations, type-checked against the installed packages.
import { BaseSessionService } from "@google/adk";
import { StaleSessionError, StepwellSessionService } from "@stepwell/client/adk";
export const sessions: BaseSessionService = StepwellSessionService.fromAddress("127.0.0.1:50051", { namespace: "agents", timeoutMs: 5000 });
export const stale = (err: unknown): boolean => err instanceof StaleSessionError;
// @ts-expect-error: the namespace is a string
StepwellSessionService.fromAddress("127.0.0.1:50051", { namespace: 1 });
TS
  printf '{ "compilerOptions": { "module": "NodeNext", "moduleResolution": "NodeNext", "target": "ES2022", "lib": ["ES2022", "DOM"], "strict": true, "skipLibCheck": true, "noEmit": true, "types": ["node"], "typeRoots": ["%s/node_modules/@types"] }, "files": ["consumer.ts"] }\n' "$OLDPWD" >tsconfig.json
  node "$OLDPWD/node_modules/typescript/bin/tsc" -p tsconfig.json
  echo "fresh app (Google ADK): require() of the subpath and its TypeScript declarations work"
)

echo "== pass 3: the guides' npm install lines (docs/guides/*.md), each in a fresh project, and the guide's imports of the client"
# Every `npm install ...` of a guide, in a code block or inline, is run as
# written (the checkout path made the clean copy's) in a fresh project of
# its own; then an ES module of the guide's `import { ... } from
# "@stepwell/client..."` lines loads there. The client is not on npm: a line
# naming @stepwell/ as a registry package, in a guide or in README.md, fails
# here, as does one that does not install from the checkout.
# A line that is the README's, byte for byte, ran above in a fresh project:
# the guide's imports are loaded there rather than installing it again.
declare -A ran_in=(["$install_cmds"]="$install_dir/app" ["$lg_install"]="$install_dir/app-langgraph" ["$ag_install"]="$install_dir/app-agents" ["$adk_install"]="$install_dir/app-adk")
guides=(../../docs/guides/*.md)
if grep -Hn 'npm install[^`]*[[:space:]]@stepwell/' "${guides[@]}" README.md; then
  echo "an npm install line above names @stepwell/ from the registry, where it is not published" >&2
  exit 1
fi
guide_runs=0
for guide in "${guides[@]}"; do
  guide_lines="$(grep -o 'npm install [^`]*' "$guide" | sed 's/[[:space:]]*$//' || true)"
  [ -n "$guide_lines" ] || continue
  guide_imports="$(grep -o 'import {[^}]*} from "@stepwell/client[^"]*"' "$guide" | sort -u || true)"
  while IFS= read -r line; do
    guide_runs=$((guide_runs + 1))
    case "$line" in
      *" /path/to/stepwell/clients/typescript"*) ;;
      *) echo "$guide: \"$line\" does not install the client from the checkout" >&2; exit 1 ;;
    esac
    (
      app="${ran_in[$line]:-}"
      if [ -n "$app" ]; then
        echo "${guide#../../}: \"$line\" is the README's, installed above in $app"
        cd "$app"
      else
        app="$install_dir/app-guide-$guide_runs"
        mkdir "$app" && cd "$app"
        printf '{ "name": "fresh-guide-app", "version": "1.0.0", "private": true, "type": "module" }\n' >package.json
        export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error
        # As for the README's line: the Agents SDK's openai 7 declares Node >= 22, so that line is not engine-strict.
        case "$line" in *@openai/agents*) ;; *) export npm_config_engine_strict=true ;; esac
        cmd="${line//\/path\/to\/stepwell/$install_dir/stepwell}"
        echo "+ ${guide#../../}: $cmd"
        bash -euo pipefail -c "$cmd"
      fi
      printf '%s;\n' "$guide_imports" >"guide-imports-$guide_runs.mjs"
      printf 'console.log("fresh app (%s): its install line worked and its imports of the client load");\n' "${guide#../../}" >>"guide-imports-$guide_runs.mjs"
      node "guide-imports-$guide_runs.mjs"
    )
  done <<<"$guide_lines"
done
# quick-start.md, adk.md, agents.md and langgraph.md each have one.
if [ "$guide_runs" -lt 4 ]; then
  echo "expected the npm install lines of at least 4 guides, ran $guide_runs" >&2
  exit 1
fi

echo "== pass 4: the README's allowScripts entry under strict-allow-scripts, npm install --install-links, and npm pack's tarball"
(
  # The entry the README gives, for an npm that refuses unlisted install scripts.
  entry="$(grep -o '"allowScripts": { "file:/path/to/stepwell/clients/typescript": true }' README.md)"
  app="$install_dir/app-strict"
  mkdir "$app" && cd "$app"
  printf '{ "name": "fresh-app-strict", "version": "1.0.0", "private": true, %s }\n' "${entry//\/path\/to\/stepwell/$install_dir/stepwell}" >package.json
  rm -rf "$copy/dist"
  npm_config_strict_allow_scripts=true npm_config_engine_strict=true npm install --no-audit --no-fund --loglevel=error "$copy"
  node -e 'const c = require("@stepwell/client"); if (typeof c.StepwellDurableExecutor !== "function") process.exit(1)'
  echo "fresh app (strict-allow-scripts): the README's allowScripts entry lets the client build"
)
(
  cd "$copy"
  export npm_config_audit=false npm_config_fund=false npm_config_loglevel=error
  npm pack --silent --pack-destination "$install_dir" >/dev/null
  for form in links tarball; do
    app="$install_dir/app-$form"
    mkdir "$app"
    printf '{ "name": "fresh-app-%s", "version": "1.0.0", "private": true }\n' "$form" >"$app/package.json"
    cd "$app"
    if [ "$form" = links ]; then npm_config_engine_strict=true npm install --install-links "$copy"; else npm_config_engine_strict=true npm install "$install_dir"/stepwell-client-*.tgz; fi
    test ! -L node_modules/@stepwell/client && test -d node_modules/@connectrpc/connect-node
    node -e 'const c = require("@stepwell/client"); if (typeof c.StepwellDurableExecutor !== "function") process.exit(1)'
    node --input-type=module -e 'import { StepwellClient } from "@stepwell/client"; if (typeof StepwellClient !== "function") process.exit(1)'
    echo "fresh app ($form): installed, require() and import work"
  done
)
