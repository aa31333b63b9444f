// Starts the real stepwell binary on a free port (or a Unix socket) with a
// throwaway SQLite file, and waits until it answers.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { StepwellClient, type StepwellClientOptions, type TlsOptions } from "../src/index.js";

/** clients/typescript, from dist/test/ (compiled) */
export const PKG_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
export const SCENARIOS_DIR = resolve(PKG_ROOT, "../scenarios");

export function stepwellBin(): string {
  if (process.env.STEPWELL_BIN) return process.env.STEPWELL_BIN;
  const target = process.env.CARGO_TARGET_DIR || "/root/.cache/stepwell/target";
  return join(target, "debug", "stepwell");
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = net.createServer();
    srv.once("error", rej);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => res(port));
    });
  });
}

/**
 * The TLS and auth material test.sh generates for its second pass, in the
 * folder STEPWELL_TEST_SECURITY_DIR names: ca.pem, server.pem/server.key,
 * the client's client.pem/client.key, auth.toml, and the tokens of its two
 * principals, `token` (admin everywhere) and `reader-token` (read only).
 */
export class Security {
  readonly token: string;
  readonly readerToken: string;
  constructor(readonly dir: string) {
    this.token = readFileSync(join(dir, "token"), "utf8").trim();
    this.readerToken = readFileSync(join(dir, "reader-token"), "utf8").trim();
  }
  tls(opts: { clientCert?: boolean } = {}): TlsOptions {
    const ca = join(this.dir, "ca.pem");
    if (opts.clientCert === false) return { ca };
    return { ca, cert: join(this.dir, "client.pem"), key: join(this.dir, "client.key") };
  }
  serveArgs(): string[] {
    const f = (name: string) => join(this.dir, name);
    return ["--tls-cert", f("server.pem"), "--tls-key", f("server.key"), "--tls-client-ca", f("ca.pem"), "--auth-file", f("auth.toml")];
  }
}

/** The second pass of test.sh sets STEPWELL_TEST_SECURITY_DIR. */
export function securityFromEnv(): Security | undefined {
  const dir = process.env.STEPWELL_TEST_SECURITY_DIR;
  return dir ? new Security(dir) : undefined;
}

export interface Sidecar {
  target: string;
  dir: string;
  proc: ChildProcess;
  /** What a client needs to reach it: nothing in plaintext, the admin token and client certificate with TLS and auth. */
  connect: Pick<StepwellClientOptions, "token" | "tls">;
  security?: Security;
  stop(): Promise<void>;
}

/**
 * Starts a sidecar; with `security` (by default the second pass's, from the
 * environment) it serves TLS, requires client certificates and checks tokens.
 * `env` adds to (or overrides) its environment.
 */
export async function startSidecar(
  opts: { unix?: boolean; extraArgs?: string[]; security?: Security; env?: Record<string, string> } = {},
): Promise<Sidecar> {
  const security = "security" in opts ? opts.security : securityFromEnv();
  const connect: Sidecar["connect"] = security ? { token: security.token, tls: security.tls() } : {};
  const bin = stepwellBin();
  if (!existsSync(bin)) throw new Error(`stepwell binary not found at ${bin} (set STEPWELL_BIN or build it with cargo build)`);
  const dir = mkdtempSync(join(tmpdir(), "stepwell-ts-"));
  const target = opts.unix ? `unix:${join(dir, "stepwell.sock")}` : `127.0.0.1:${await freePort()}`;
  const proc = spawn(
    bin,
    [
      "serve",
      "--listen",
      target,
      "--database-url",
      `sqlite://${join(dir, "x.db")}`,
      ...(security?.serveArgs() ?? []),
      ...(opts.extraArgs ?? []),
    ],
    { stdio: ["ignore", "ignore", "pipe"], env: { ...process.env, STEPWELL_LOG: process.env.STEPWELL_LOG ?? "warn", STEPWELL_ADMIN_LISTEN: "off", ...opts.env } },
  );
  let stderr = "";
  proc.stderr!.on("data", (d: Buffer) => {
    stderr += d.toString();
    if (stderr.length > 20_000) stderr = stderr.slice(-20_000);
  });
  let exited: number | null | undefined;
  proc.on("exit", (code) => (exited = code));
  const stop = async () => {
    if (exited === undefined) {
      const done = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      const t = setTimeout(() => proc.kill("SIGKILL"), 5000);
      await done;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  // Wait until it answers a cheap RPC (bounded).
  const probe = new StepwellClient({ target, timeoutMs: 500, maxAttempts: 1, ...connect });
  const deadline = Date.now() + 30_000;
  try {
    for (;;) {
      if (exited !== undefined) throw new Error(`stepwell exited with ${exited}: ${stderr}`);
      try {
        await probe.listTurns({ pageSize: 1 });
        break;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`stepwell did not answer within 30 s: ${String(err)}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    }
  } catch (err) {
    probe.close();
    await stop();
    throw err;
  }
  probe.close();
  return { target, dir, proc, connect, security, stop };
}

export function freshNamespace(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9._-]/g, "-").slice(0, 40);
  return `${clean}-${Math.random().toString(36).slice(2, 10)}`;
}
