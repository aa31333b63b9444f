// Starts the real stepwell binary on a free port (or a Unix socket) with a
// throwaway SQLite file, and waits until it answers; it can be killed
// (SIGKILL) and started again on the same file and port.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import * as http2 from "node:http2";
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
  /** The current process (a new one after start()). */
  proc: ChildProcess;
  /** What a client needs to reach it: nothing in plaintext, the admin token and client certificate with TLS and auth. */
  connect: Pick<StepwellClientOptions, "token" | "tls">;
  security?: Security;
  /** Stops it (SIGTERM, then SIGKILL after 5 s) and removes its folder. */
  stop(): Promise<void>;
  /** Kills it with SIGKILL, as a crash would, and waits for the process to exit. */
  kill(): Promise<void>;
  /** Starts it again on the same SQLite file and address, and waits until its health service answers SERVING. */
  start(): Promise<void>;
}

/**
 * Asks the gRPC health service (grpc.health.v1.Health/Check, service "") on
 * a connection of its own, over HTTP/2 directly; resolves to the serving
 * status (1 = SERVING), rejects when it cannot ask.
 */
export async function healthStatus(target: string, security?: Security, timeoutMs = 1000): Promise<number> {
  const tls = security !== undefined;
  const authority = target.startsWith("unix:") ? "http://localhost" : `${tls ? "https" : "http"}://${target}`;
  const session = http2.connect(authority, {
    ...(target.startsWith("unix:") ? { createConnection: () => net.connect(target.slice(5)) } : {}),
    ...(security
      ? { ca: readFileSync(join(security.dir, "ca.pem")), cert: readFileSync(join(security.dir, "client.pem")), key: readFileSync(join(security.dir, "client.key")), servername: "localhost" }
      : {}),
  });
  try {
    return await new Promise<number>((res, rej) => {
      const timer = setTimeout(() => rej(new Error("health check timed out")), timeoutMs);
      session.once("error", (e) => {
        clearTimeout(timer);
        rej(e);
      });
      const req = session.request({
        ":method": "POST",
        ":path": "/grpc.health.v1.Health/Check",
        "content-type": "application/grpc",
        te: "trailers",
      });
      const chunks: Buffer[] = [];
      let grpcStatus: string | undefined;
      req.on("response", (headers) => {
        if (headers["grpc-status"] !== undefined) grpcStatus = String(headers["grpc-status"]);
      });
      req.on("trailers", (trailers) => (grpcStatus = String(trailers["grpc-status"])));
      req.on("data", (d: Buffer) => chunks.push(d));
      req.on("error", (e) => {
        clearTimeout(timer);
        rej(e);
      });
      req.on("end", () => {
        clearTimeout(timer);
        if (grpcStatus !== "0") return rej(new Error(`health check: grpc-status ${grpcStatus}`));
        // One length-prefixed message: HealthCheckResponse { status = 1 (varint) }; empty means 0 (UNKNOWN).
        const body = Buffer.concat(chunks).subarray(5);
        res(body.length >= 2 && body[0] === 0x08 ? body[1]! : 0);
      });
      req.end(Buffer.from([0, 0, 0, 0, 0])); // an empty HealthCheckRequest
    });
  } finally {
    session.destroy();
  }
}

/**
 * Starts a sidecar; with `security` (by default the second pass's, from the
 * environment) it serves TLS, requires client certificates and checks tokens.
 * `env` adds to (or overrides) its environment.
 */
export async function startSidecar(
  opts: { unix?: boolean; extraArgs?: string[]; security?: Security; env?: Record<string, string>; databaseUrl?: string } = {},
): Promise<Sidecar> {
  const security = "security" in opts ? opts.security : securityFromEnv();
  const connect: Sidecar["connect"] = security ? { token: security.token, tls: security.tls() } : {};
  const bin = stepwellBin();
  if (!existsSync(bin)) throw new Error(`stepwell binary not found at ${bin} (set STEPWELL_BIN or build it with cargo build)`);
  const dir = mkdtempSync(join(tmpdir(), "stepwell-ts-"));
  const target = opts.unix ? `unix:${join(dir, "stepwell.sock")}` : `127.0.0.1:${await freePort()}`;
  const args = [
    "serve",
    "--listen",
    target,
    "--database-url",
    opts.databaseUrl ?? `sqlite://${join(dir, "x.db")}`,
    ...(security?.serveArgs() ?? []),
    ...(opts.extraArgs ?? []),
  ];
  const env = { ...process.env, STEPWELL_LOG: process.env.STEPWELL_LOG ?? "warn", STEPWELL_ADMIN_LISTEN: "off", ...opts.env };

  let stderr = "";
  let exited: number | null | undefined;
  let exitedPromise: Promise<void>;
  const spawnProc = (): ChildProcess => {
    const p = spawn(bin, args, { stdio: ["ignore", "ignore", "pipe"], env });
    exited = undefined;
    p.stderr!.on("data", (d: Buffer) => {
      stderr += d.toString();
      if (stderr.length > 20_000) stderr = stderr.slice(-20_000);
    });
    exitedPromise = new Promise((r) =>
      p.once("exit", (code) => {
        exited = code;
        r();
      }),
    );
    return p;
  };
  const sidecar: Sidecar = {
    target,
    dir,
    proc: spawnProc(),
    connect,
    security,
    async kill() {
      if (exited === undefined) {
        sidecar.proc.kill("SIGKILL");
        await exitedPromise;
      }
    },
    async stop() {
      if (exited === undefined) {
        sidecar.proc.kill("SIGTERM");
        const t = setTimeout(() => sidecar.proc.kill("SIGKILL"), 5000);
        await exitedPromise;
        clearTimeout(t);
      }
      rmSync(dir, { recursive: true, force: true });
    },
    async start() {
      if (exited === undefined) throw new Error("the sidecar is still running");
      sidecar.proc = spawnProc();
      const deadline = Date.now() + 30_000;
      for (;;) {
        if (exited !== undefined) throw new Error(`stepwell exited with ${exited}: ${stderr}`);
        let last: string;
        try {
          const status = await healthStatus(target, security);
          if (status === 1) return;
          last = `status ${status}`;
        } catch (err) {
          last = String(err);
        }
        if (Date.now() > deadline) throw new Error(`stepwell was not SERVING within 30 s: ${last}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
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
    await sidecar.stop();
    throw err;
  }
  probe.close();
  return sidecar;
}

export function freshNamespace(prefix: string): string {
  const clean = prefix.toLowerCase().replace(/[^a-z0-9._-]/g, "-").slice(0, 40);
  return `${clean}-${Math.random().toString(36).slice(2, 10)}`;
}
