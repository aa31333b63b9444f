// Runs the console's browser tests on the store STEPWELL_TEST_BACKEND names
// (sqlite, or postgres under scripts/with-postgres): starts one seeded
// sidecar, hands its address, tokens and fixture to the test files through
// a JSON file (STEPWELL_CONSOLE_FIXTURE), runs them with Node's test runner
// two files at a time (they share the sidecar, and each file's tests touch
// only the seeded rows of their own, so no order is needed), and stops the
// sidecar whatever the outcome. The sidecar's stderr, audit events included,
// is printed when a test fails.
import { spawn } from "node:child_process";
import { mkdirSync, writeFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { startSidecar } from "./lib/sidecar.mjs";
import { seed } from "./lib/seed.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const backend = process.env.STEPWELL_TEST_BACKEND ?? "sqlite";
if (!["sqlite", "postgres"].includes(backend)) throw new Error(`STEPWELL_TEST_BACKEND=${backend}: sqlite or postgres`);
const artifacts = resolve(process.env.STEPWELL_ARTIFACTS ?? join(here, "../../target/console-artifacts"));
mkdirSync(artifacts, { recursive: true });

const sidecar = await startSidecar({ backend });
let code = 1;
try {
  const fixture = await seed(sidecar);
  const file = join(sidecar.dir, "fixture.json");
  const { base, target, tokens, log } = sidecar;
  writeFileSync(file, JSON.stringify({ backend, base, target, tokens, log, artifacts, ...fixture }), { mode: 0o600 });
  const tests = readdirSync(join(here, "test"))
    .filter((f) => f.endsWith(".test.mjs"))
    .sort()
    .map((f) => join(here, "test", f));
  const only = process.argv.slice(2);
  const child = spawn(process.execPath, ["--test", "--test-concurrency=2", "--test-force-exit", ...(only.length ? only : tests)], {
    stdio: "inherit",
    env: { ...process.env, STEPWELL_CONSOLE_FIXTURE: file },
  });
  code = await new Promise((r) => child.once("exit", (c) => r(c ?? 1)));
  if (code !== 0) console.error(`--- the sidecar's stderr (${backend}) ---\n${sidecar.stderr()}`);
} finally {
  await sidecar.stop();
}
console.log(`console browser tests on ${backend}: ${code === 0 ? "passed" : "FAILED"}; screenshots in ${artifacts}`);
process.exit(code);
