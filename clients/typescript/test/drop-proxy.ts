// An HTTP/2 proxy of a test's own between a client and a sidecar, which
// does to the next request what the test arms it with: cut its connection
// as a crashed sidecar would, reset its stream, hold it, or answer it itself.
//
// It passes every frame through until armed. In the TLS pass it ends the
// client's TLS with the test PKI's server certificate (asking for a client
// certificate, as the sidecar does) and dials the sidecar with the client
// certificate, so that it sees frames; its cuts close the TCP connection
// under the TLS without a close_notify, as a crash would.
import { readFileSync } from "node:fs";
import * as net from "node:net";
import { join } from "node:path";
import * as tls from "node:tls";
import type { Security } from "./sidecar.js";

/** What the proxy does to the next request (the next HEADERS frame a client sends). */
export type DropMode =
  /** Drops it and closes the connection with a FIN, as the kernel does for a killed sidecar. */
  | "fin"
  /** Drops it and resets the connection, as for a sidecar killed with bytes it had not read. */
  | "rst"
  /** Drops it, answers RST_STREAM(CANCEL), then a FIN: a proxy in between losing the sidecar. */
  | "reset-stream"
  /** Forwards its HEADERS but none of its DATA: the call stays in flight. */
  | "hold"
  /** Drops it and answers with the proxy's own trailers-only response, then a FIN. */
  | "answer";

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
const DATA = 0x0;
const HEADERS = 0x1;
const RST_STREAM = 0x3;

function frame(kind: number, flags: number, stream: number, payload: Buffer): Buffer {
  const header = Buffer.alloc(9);
  header.writeUIntBE(payload.length, 0, 3);
  header[3] = kind;
  header[4] = flags;
  header.writeUInt32BE(stream, 5);
  return Buffer.concat([header, payload]);
}

/** Calls `onFrame` with each whole HTTP/2 frame of a byte stream, after `skip` leading bytes. */
function frames(skip: number, onFrame: (f: Buffer) => void, onSkipped: (b: Buffer) => void): (d: Buffer) => void {
  let buf = Buffer.alloc(0);
  return (d) => {
    buf = Buffer.concat([buf, d]);
    if (skip > 0) {
      if (buf.length < skip) return;
      onSkipped(buf.subarray(0, skip));
      buf = buf.subarray(skip);
      skip = 0;
    }
    while (buf.length >= 9) {
      const n = 9 + buf.readUIntBE(0, 3);
      if (buf.length < n) return;
      onFrame(buf.subarray(0, n));
      buf = buf.subarray(n);
    }
  };
}

/**
 * An HPACK header block of literal fields that are never indexed, so that it
 * leaves the client's decoding table as it was.
 */
export function trailersOnly(fields: Array<[string, string]>): Buffer {
  const integer = (n: number): number[] => {
    if (n < 127) return [n];
    const out = [127];
    for (n -= 127; n >= 128; n = Math.floor(n / 128)) out.push((n % 128) | 0x80);
    return [...out, n];
  };
  const parts: Buffer[] = [];
  for (const [name, value] of fields) {
    const [n, v] = [Buffer.from(name), Buffer.from(value)];
    parts.push(Buffer.from([0x10, ...integer(n.length)]), n, Buffer.from(integer(v.length)), v);
  }
  return Buffer.concat(parts);
}

interface Conn {
  raw: net.Socket;
  client: net.Socket;
  up: net.Socket;
  held: number;
}

export class DropProxy {
  #mode: DropMode | undefined;
  #answer: Buffer = Buffer.alloc(0);
  #applied = 0;
  #waiters: Array<() => void> = [];
  readonly #raws = new Set<net.Socket>();
  /** Requests (HEADERS frames) clients sent. */
  requests = 0;

  private constructor(
    private readonly server: net.Server,
    readonly target: string,
  ) {}

  /** Listens on a free loopback port and forwards to `upstream` (host:port). */
  static async start(upstream: string, security?: Security): Promise<DropProxy> {
    const i = upstream.lastIndexOf(":");
    const [host, port] = [upstream.slice(0, i), Number(upstream.slice(i + 1))];
    const file = (name: string) => readFileSync(join(security!.dir, name));
    let proxy: DropProxy | undefined;
    const server = net.createServer((raw) => {
      raw.setNoDelay(true);
      proxy!.#raws.add(raw);
      raw.once("close", () => proxy!.#raws.delete(raw));
      raw.on("error", () => raw.destroy());
      if (!security) return proxy!.serve({ raw, client: raw, up: net.connect(port, host), held: -1 });
      const client = new tls.TLSSocket(raw, {
        isServer: true,
        secureContext: tls.createSecureContext({ key: file("server.key"), cert: file("server.pem"), ca: file("ca.pem") }),
        requestCert: true,
        rejectUnauthorized: true,
        ALPNProtocols: ["h2"],
      });
      client.on("error", () => raw.destroy());
      client.once("secure", () => {
        const up = tls.connect({ host, port, ca: file("ca.pem"), cert: file("client.pem"), key: file("client.key"), servername: "localhost", ALPNProtocols: ["h2"] });
        proxy!.serve({ raw, client, up, held: -1 });
      });
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    proxy = new DropProxy(server, `127.0.0.1:${(server.address() as net.AddressInfo).port}`);
    return proxy;
  }

  /** Applies `mode` to the next request of any connection; `answer` is the header block "answer" sends. */
  arm(mode: DropMode, answer: Buffer = Buffer.alloc(0)): void {
    this.#mode = mode;
    this.#answer = answer;
  }

  /** Resolves once the armed modes have met `n` requests in all (bounded). */
  async waitApplied(n: number, limitMs = 30_000): Promise<void> {
    const deadline = Date.now() + limitMs;
    while (this.#applied < n) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`the proxy applied ${this.#applied} armed modes within ${limitMs} ms, not ${n}`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Closes every client connection now, with an RST when `reset`, else with a FIN. */
  cutAll(reset: boolean): void {
    for (const raw of this.#raws) {
      if (reset) raw.resetAndDestroy();
      else raw.end();
    }
  }

  async close(): Promise<void> {
    this.cutAll(true);
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private serve(c: Conn): void {
    c.up.setNoDelay(true);
    c.up.on("error", () => c.raw.destroy());
    c.up.on("close", () => c.raw.end());
    c.raw.once("close", () => c.up.destroy());
    // The sidecar's frames go to the client whole, so that the proxy can put frames of its own between them.
    c.up.on("data", frames(0, (f) => c.client.write(f), () => {}));
    c.client.on("data", frames(PREFACE.length, (f) => this.fromClient(c, f), (preface) => c.up.write(preface)));
  }

  private fromClient(c: Conn, f: Buffer): void {
    if (c.raw.destroyed || c.raw.writableEnded) return; // cut: what the client still sends is dropped
    const kind = f[3];
    const stream = f.readUInt32BE(5) & 0x7fffffff;
    if (kind === HEADERS) {
      this.requests++;
      const mode = this.#mode;
      const answer = this.#answer;
      this.#mode = undefined;
      if (mode !== undefined) return this.apply(c, mode, stream, f, answer);
    }
    if (kind === DATA && stream === c.held) return;
    c.up.write(f);
  }

  private apply(c: Conn, mode: DropMode, stream: number, f: Buffer, answer: Buffer): void {
    this.#applied++;
    for (const wake of this.#waiters.splice(0)) wake();
    if (mode === "hold") {
      c.held = stream;
      c.up.write(f);
      return;
    }
    if (mode === "reset-stream") c.client.write(frame(RST_STREAM, 0, stream, Buffer.from([0, 0, 0, 0x8])));
    if (mode === "answer") c.client.write(frame(HEADERS, 0x1 | 0x4, stream, answer));
    // The client's side goes first: ending the sidecar's side would end the client's with a FIN of its own.
    const cut = () => {
      if (mode === "rst") c.raw.resetAndDestroy();
      else c.raw.end();
      c.up.removeAllListeners("close");
      c.up.destroy();
    };
    // A frame written above is handed to the TCP socket before the FIN.
    if (c.client === c.raw) cut();
    else c.client.write(Buffer.alloc(0), cut);
  }
}
