// Starts the real stepwell binary for the console's browser tests: free
// ports for its gRPC and admin listeners, an auth file of three principals
// made here (tokens random, only their SHA-256 in the file), the console in
// admin mode, and a store of its own (a temp SQLite file, or a fresh
// database on the Postgres server STEPWELL_TEST_POSTGRES_URL names), so that
// reruns never meet an earlier run's data.
import { spawn, execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { appendFileSync, mkdtempSync, rmSync, writeFileSync, existsSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { XSS_PRINCIPAL } from "./payloads.mjs";

/** The stalled threshold the console is started with; the seeded stalled turn waits it out. */
export const STALLED_AFTER_SECONDS = 10;

export function stepwellBin() {
  if (process.env.STEPWELL_BIN) return process.env.STEPWELL_BIN;
  const target = process.env.CARGO_TARGET_DIR || join(process.env.HOME || "/root", ".cache/stepwell/target");
  return join(target, "debug", "stepwell");
}

/** A port nobody listens on now: bound to 0, read back, closed. */
export async function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function newToken() {
  return `swt_${randomBytes(32).toString("base64url")}`;
}

function sha256(text) {
  return createHash("sha256").update(text).digest("hex");
}

/**
 * The auth file: `admin` holds the admin role in alpha and beta, `reader`
 * the read role in alpha only, and a writer in alpha whose id is an
 * injection payload, so that the waits it settles show it as "settled by".
 */
function writeAuthFile(dir) {
  const tokens = { admin: newToken(), reader: newToken(), writer: newToken() };
  const toml = [
    `[[principals]]\nid = "admin"\ntoken_sha256 = "${sha256(tokens.admin)}"`,
    `grants = [{ namespace = "alpha", role = "admin" }, { namespace = "beta", role = "admin" }]`,
    `[[principals]]\nid = "reader"\ntoken_sha256 = "${sha256(tokens.reader)}"`,
    `grants = [{ namespace = "alpha", role = "read" }]`,
    `[[principals]]\nid = ${JSON.stringify(XSS_PRINCIPAL)}\ntoken_sha256 = "${sha256(tokens.writer)}"`,
    `grants = [{ namespace = "alpha", role = "write" }]`,
  ].join("\n");
  const path = join(dir, "auth.toml");
  writeFileSync(path, `${toml}\n`, { mode: 0o600 });
  return { path, tokens };
}

/**
 * The store's URL: a SQLite file in `dir`, or on Postgres a database made
 * for this run (dropped by the returned cleanup).
 */
function storeUrl(backend, dir) {
  if (backend === "sqlite") return { url: `sqlite://${join(dir, "console.db")}`, drop: () => {} };
  const base = process.env.STEPWELL_TEST_POSTGRES_URL;
  if (!base) throw new Error("STEPWELL_TEST_BACKEND=postgres needs STEPWELL_TEST_POSTGRES_URL (run under scripts/with-postgres)");
  const name = `stepwell_console_${process.pid}_${randomBytes(4).toString("hex")}`;
  execFileSync("psql", [base, "-v", "ON_ERROR_STOP=1", "-qc", `CREATE DATABASE ${name}`], { stdio: ["ignore", "ignore", "inherit"] });
  const url = new URL(base);
  url.pathname = `/${name}`;
  const drop = () => {
    try {
      execFileSync("psql", [base, "-qc", `DROP DATABASE IF EXISTS ${name} WITH (FORCE)`], { stdio: "ignore" });
    } catch {
      // The throwaway cluster goes away with its run; a server given from outside keeps a stray database.
    }
  };
  return { url: url.toString(), drop };
}

/** Polls `fn` until it returns a truthy value, failing after `ms`. */
export async function until(fn, what, ms = 30_000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ""}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts the sidecar and waits until its admin listener answers /healthz.
 * `consoleArgs` are the console's flags (a binary without a console is
 * started without them to test this harness alone).
 */
export async function startSidecar({ backend, consoleArgs = consoleArgsFromEnv() }) {
  const bin = stepwellBin();
  if (!existsSync(bin)) throw new Error(`stepwell binary not found at ${bin} (set STEPWELL_BIN)`);
  const dir = mkdtempSync(join(tmpdir(), "stepwell-console-"));
  const auth = writeAuthFile(dir);
  const store = storeUrl(backend, dir);
  const grpcPort = await freePort();
  const adminPort = await freePort();
  const args = ["serve", "--listen", `127.0.0.1:${grpcPort}`, "--admin-listen", `127.0.0.1:${adminPort}`];
  args.push("--database-url", store.url, "--auth-file", auth.path, ...consoleArgs);
  // JSON logs, audit events kept: the action tests read the console's audit events from the log file.
  args.push("--log-format", "json", "--log", "warn,stepwell::audit=info");
  const log = join(dir, "sidecar.log");
  const proc = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"], env: process.env });
  let stderr = "";
  proc.stderr.on("data", (d) => {
    appendFileSync(log, d);
    stderr = (stderr + d.toString()).slice(-50_000);
  });
  const exited = new Promise((r) => proc.once("exit", r));
  const base = `http://127.0.0.1:${adminPort}`;
  const sidecar = { base, target: `127.0.0.1:${grpcPort}`, tokens: auth.tokens, dir, log, stderr: () => stderr };
  sidecar.stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    }
    store.drop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    // A sidecar that exited ends the polling at once, with its stderr.
    await until(async () => proc.exitCode !== null || (await fetch(`${base}/healthz`)).ok, "the sidecar's /healthz", 60_000);
    if (proc.exitCode !== null) throw new Error(`stepwell exited with ${proc.exitCode}: ${stderr}`);
  } catch (err) {
    await sidecar.stop();
    throw err;
  }
  return sidecar;
}

/**
 * The console's flags: by default admin mode and the short stalled
 * threshold. STEPWELL_CONSOLE_ARGS replaces them (split at spaces), so a
 * run can show that the tests fail on a console that is read-only or has
 * another threshold; "none" starts a binary without any, to check the
 * harness and the seeding alone.
 */
function consoleArgsFromEnv() {
  const given = process.env.STEPWELL_CONSOLE_ARGS;
  if (given === undefined) return defaultConsoleArgs();
  return given === "none" ? [] : given.split(" ").filter(Boolean);
}

export function defaultConsoleArgs() {
  return ["--console", "admin", "--console-stalled-after-seconds", String(STALLED_AFTER_SECONDS)];
}
