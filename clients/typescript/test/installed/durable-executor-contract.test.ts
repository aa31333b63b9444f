// The DurableExecutor contract (the seed StepwellDurableExecutor implements),
// one test per MUST and MUST NOT of it and of the behaviour it states, run
// against real sidecars through the client as a user installs it: test.sh
// copies this file into a fresh app outside the repository, where
// "@stepwell/client" is the installed package, compiles it there against the
// installed declarations and runs it. The sidecar helper is the repository's
// (STEPWELL_TEST_SIDECAR_MODULE), used only to start, kill and restart
// sidecars.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import {
  StepwellClient,
  StepwellDurableExecutor,
  StepwellError,
  type StepwellClientOptions,
  type TurnCheckpoint,
} from "@stepwell/client";

/** The parts of test/sidecar.ts's Sidecar these tests use. */
interface Sidecar {
  target: string;
  connect: Pick<StepwellClientOptions, "token" | "tls">;
  stop(): Promise<void>;
  kill(): Promise<void>;
  start(): Promise<void>;
}
const helper = process.env.STEPWELL_TEST_SIDECAR_MODULE;
if (!helper) throw new Error("STEPWELL_TEST_SIDECAR_MODULE must name the compiled test/sidecar.js");
const { startSidecar } = (await import(pathToFileURL(helper).href)) as { startSidecar(): Promise<Sidecar> };

type Interceptor = NonNullable<StepwellClientOptions["interceptors"]>[number];

/**
 * One process of the application: its own client and executor, recording
 * every RPC it sends and the `inserted` of every Checkpoint answer.
 */
class Process {
  readonly rpcs: string[] = [];
  readonly inserted: boolean[] = [];
  readonly client: StepwellClient;
  readonly executor: StepwellDurableExecutor;
  constructor(sidecar: Sidecar, namespace: string, options: Partial<StepwellClientOptions> = {}) {
    const record: Interceptor = (next) => async (req) => {
      this.rpcs.push(req.method.name);
      const res = await next(req);
      if (req.method.name === "Checkpoint" && !res.stream) this.inserted.push((res.message as unknown as { inserted: boolean }).inserted);
      return res;
    };
    this.client = new StepwellClient({ target: sidecar.target, ...sidecar.connect, ...options, interceptors: [record] });
    this.executor = new StepwellDurableExecutor({ client: this.client, namespace });
  }
  close(): void {
    this.client.close();
  }
}

let sequence = 0;
/** A namespace no other test uses. */
function freshNamespace(name: string): string {
  return `contract-${name}-${process.pid}-${++sequence}`;
}

/** An ISO timestamp `ms` after 2026-05-01T10:00:00Z, as Date.prototype.toISOString() gives it. */
function at(ms: number): string {
  return new Date(Date.UTC(2026, 4, 1, 10) + ms).toISOString();
}

/** A turn's seven lifecycle checkpoints, 1 ms apart, with the canonical phases' state shapes. */
function turnOfSeven(turnId: string): TurnCheckpoint[] {
  const asked = { role: "user", content: "Flights to Lisbon on Friday?" };
  const steps: Array<Pick<TurnCheckpoint, "phase" | "state">> = [
    { phase: "started", state: { actorId: "actor-1", slotKey: "slot-1", messages: [asked], expiresAt: "2026-05-01T11:00:00.000Z" } },
    { phase: "llm-complete", state: { messages: [asked, { role: "assistant", tool: "search" }], respond: false } },
    { phase: "tool-dispatched", state: { tool: "search", args: { to: "LIS", day: "2026-05-08" } } },
    { phase: "tool-received", state: { message: { tool: "search", result: ["TP 1234", "LH 1172"] }, slotKey: "slot-1", manifestId: "m-1" } },
    { phase: "tool-received", state: { message: { tool: "price", result: 412.5 }, slotKey: "slot-1" } },
    { phase: "llm-complete", state: { messages: [asked, { role: "assistant", content: "TP 1234 at 412.50 €" }], respond: true } },
    { phase: "settled", state: { turnState: "complete", respond: "TP 1234 at 412.50 €", reason: null } },
  ];
  return steps.map((s, i) => ({ turnId, sessionId: "session-1", ...s, timestamp: at(i) }));
}

/** The order restore() must give: by the instant each timestamp names. */
function byInstant(checkpoints: readonly TurnCheckpoint[]): TurnCheckpoint[] {
  return [...checkpoints].sort((a, b) => Date.parse(a.timestamp) - Date.parse(b.timestamp));
}

/** A permutation of 0..n-1 that is far from their order (n must not be a multiple of 37). */
function scrambled(n: number): number[] {
  return Array.from({ length: n }, (_, i) => (i * 37 + 11) % n);
}

describe("the DurableExecutor contract, on the installed @stepwell/client", () => {
  let sidecar: Sidecar;
  before(async () => {
    sidecar = await startSidecar();
  });
  after(async () => {
    await sidecar?.stop();
  });

  it("MUST: two calls with identical (turnId, phase, timestamp) store one checkpoint, from one executor, concurrently, or from another process", async () => {
    const namespace = freshNamespace("identical");
    const first = new Process(sidecar, namespace);
    const other = new Process(sidecar, namespace);
    try {
      const started = turnOfSeven("turn-1")[0]!;
      await first.executor.checkpoint(started);
      await first.executor.checkpoint(started); // a network-layer retry
      await Promise.all([first.executor.checkpoint({ ...started }), first.executor.checkpoint({ ...started })]);
      await other.executor.checkpoint({ ...started }); // the same call, delivered through another process
      assert.deepEqual(first.inserted, [true, false, false, false]);
      assert.deepEqual(other.inserted, [false]);
      assert.deepEqual(await other.executor.restore("turn-1"), [started]);
    } finally {
      first.close();
      other.close();
    }
  });

  it("MUST NOT dedupe on (turnId, phase) alone: one phase at distinct timestamps is that many checkpoints, each at its own timestamp", async () => {
    const p = new Process(sidecar, freshNamespace("same-phase"));
    try {
      const received = ["2026-05-01T10:00:00.000Z", "2026-05-01T10:00:00.000000001Z", "2026-05-01T10:00:00.001Z"].map((timestamp, i) => ({
        turnId: "turn-1",
        sessionId: "session-1",
        phase: "tool-received",
        state: { message: { result: i }, slotKey: "slot-1" },
        timestamp,
      }));
      // Tool results land in any order: the last one first.
      for (const i of [2, 0, 1]) await p.executor.checkpoint(received[i]!);
      assert.deepEqual(p.inserted, [true, true, true]);
      assert.deepEqual(await p.executor.restore("turn-1"), received);
    } finally {
      p.close();
    }
  });

  it("MUST (idempotency): a restarted process re-sending the 7 stored checkpoints of a turn exactly stores none of them again", async () => {
    const namespace = freshNamespace("resend");
    const before = new Process(sidecar, namespace);
    const turn = turnOfSeven("turn-1");
    try {
      for (const c of turn) await before.executor.checkpoint(c);
    } finally {
      before.close();
    }
    const after = new Process(sidecar, namespace); // the process after a restart: a new executor, nothing remembered
    try {
      for (const c of turn) await after.executor.checkpoint(structuredClone(c));
      assert.deepEqual(after.inserted, [false, false, false, false, false, false, false]);
      const restored = await after.executor.restore("turn-1");
      assert.equal(restored.length, 7);
      assert.deepEqual(restored, turn);
      // What restore() gave, sent again as it is, is the same seven tuples too.
      for (const c of restored) await after.executor.checkpoint(c);
      assert.deepEqual(await after.executor.restore("turn-1"), turn);
    } finally {
      after.close();
    }
  });

  it("MUST (order): checkpoint() calls of one turn in flight together restore in timestamp order, not the order they were made or arrived", async () => {
    const p = new Process(sidecar, freshNamespace("concurrent"));
    try {
      const n = 60;
      const turn = Array.from({ length: n }, (_, i) => ({ turnId: "turn-1", sessionId: "session-1", phase: i % 2 ? "tool-received" : "llm-complete", state: { i }, timestamp: at(i) }));
      await Promise.all(scrambled(n).map((i) => p.executor.checkpoint(turn[i]!)));
      assert.deepEqual(await p.executor.restore("turn-1"), turn);
    } finally {
      p.close();
    }
  });

  it("MUST (order): started at 12:00:00.000+02:00, sent after settled at 10:00:00.001Z, is restored first, at the instant it names", async () => {
    const p = new Process(sidecar, freshNamespace("offset"));
    try {
      const settled = { turnId: "turn-1", sessionId: "session-1", phase: "settled", state: { turnState: "complete" }, timestamp: "2026-05-01T10:00:00.001Z" };
      const started = { turnId: "turn-1", sessionId: "session-1", phase: "started", state: { actorId: "actor-1" }, timestamp: "2026-05-01T12:00:00.000+02:00" };
      await p.executor.checkpoint(settled);
      await p.executor.checkpoint(started);
      const restored = await p.executor.restore("turn-1");
      assert.deepEqual(restored.map((c) => [c.phase, c.timestamp]), [
        ["started", "2026-05-01T10:00:00.000Z"],
        ["settled", "2026-05-01T10:00:00.001Z"],
      ]);
      // The same instant written another way is the same timestamp: the same tuple, stored once.
      await p.executor.checkpoint({ ...started, timestamp: "2026-05-01T10:00:00Z" });
      await p.executor.checkpoint({ ...started, timestamp: "2026-05-01T03:30:00.000000000-06:30" });
      assert.deepEqual(p.inserted, [true, true, false, false]);
    } finally {
      p.close();
    }
  });

  it("stores the caller's timestamp exactly, to the nanosecond, whatever the turn already holds, and sends only the one Checkpoint call", async () => {
    const namespace = freshNamespace("exact");
    const writer = new Process(sidecar, namespace);
    const other = new Process(sidecar, namespace);
    try {
      const cp = (phase: string, timestamp: string): TurnCheckpoint => ({ turnId: "turn-1", sessionId: "s", phase, state: { phase }, timestamp });
      await writer.executor.checkpoint(cp("settled", "2026-05-01T10:00:09.123456789Z"));
      // Another process, which never read the turn, writes timestamps before the newest stored one.
      await other.executor.checkpoint(cp("started", "2026-05-01T10:00:00.000000001Z"));
      await other.executor.checkpoint(cp("llm-complete", "2026-05-01T12:00:05.5+02:00"));
      assert.deepEqual(other.rpcs, ["Checkpoint", "Checkpoint"]);
      assert.deepEqual(writer.rpcs, ["Checkpoint"]);
      assert.deepEqual((await writer.executor.restore("turn-1")).map((c) => [c.phase, c.timestamp]), [
        ["started", "2026-05-01T10:00:00.000000001Z"],
        ["llm-complete", "2026-05-01T10:00:05.500Z"],
        ["settled", "2026-05-01T10:00:09.123456789Z"],
      ]);
    } finally {
      writer.close();
      other.close();
    }
  });

  it("MUST: state round-trips through JSON, whatever JSON it is", async () => {
    const p = new Process(sidecar, freshNamespace("json"));
    try {
      const states: unknown[] = [
        null,
        0,
        -1.5e-300,
        Number.MAX_SAFE_INTEGER,
        "",
        "quotes \" backslash \\ newline \n tab \t nul \u0000 é 日本 🚀",
        true,
        [],
        {},
        [[[]], [{}], null, false, 1, "x"],
        { "": "empty key", "10": "numeric key", "a.b": { "[c]": [1, { d: [null] }] }, __proto__x: 1 },
        { deep: Array.from({ length: 50 }).reduce<unknown>((inner) => ({ inner }), "bottom") },
        ...turnOfSeven("shapes").map((c) => c.state),
      ];
      const turn = states.map((state, i) => ({ turnId: "turn-1", sessionId: "s", phase: "p", state, timestamp: at(i) }));
      for (const c of turn) await p.executor.checkpoint(c);
      const restored = await p.executor.restore("turn-1");
      assert.deepStrictEqual(restored.map((c) => c.state), states);
      // An object property that is undefined is absent in JSON, and is stored absent.
      await p.executor.checkpoint({ turnId: "turn-2", sessionId: "s", phase: "tool-received", state: { message: "m", manifestId: undefined }, timestamp: at(0) });
      assert.deepStrictEqual((await p.executor.restore("turn-2"))[0]!.state, { message: "m" });
    } finally {
      p.close();
    }
  });

  it("MUST NOT: state that does not round-trip through JSON is refused with a TypeError naming it, and nothing is sent or stored", async () => {
    const p = new Process(sidecar, freshNamespace("not-json"));
    class Participant {
      constructor(readonly name: string) {}
    }
    const cycle: Record<string, unknown> = { name: "loop" };
    cycle.self = cycle;
    const refused: Array<[unknown, RegExp]> = [
      [() => 1, /^state is a function/],
      [{ handler: () => 1 }, /state\.handler is a function/],
      [{ slots: new Map([["a", 1]]) }, /state\.slots is a Map/],
      [new Set([1]), /state is a Set/],
      [{ big: 10n }, /state\.big is a bigint/],
      [{ participant: new Participant("p") }, /state\.participant is a Participant/],
      [{ abort: new AbortController() }, /state\.abort is an AbortController/],
      [{ when: new Date(0) }, /state\.when is a Date/],
      [{ n: NaN }, /state\.n is the number NaN/],
      [[1, Infinity], /state\[1\] is the number Infinity/],
      [undefined, /^state is undefined/],
      [[undefined], /state\[0\] is undefined/],
      [[1, , 3], /state\[1\] is a hole/],
      [{ s: Symbol("s") }, /state\.s is a symbol/],
      [{ [Symbol("k")]: 1 }, /state is an object with symbol keys/],
      [{ toJSON: () => "other" }, /state is an object with a toJSON method/],
      [cycle, /state\.self refers back/],
      [{ bytes: new Uint8Array([1]) }, /state\.bytes is a Uint8Array/],
    ];
    try {
      for (const [state, named] of refused) {
        await assert.rejects(
          p.executor.checkpoint({ turnId: "turn-1", sessionId: "s", phase: "started", state, timestamp: at(0) }),
          (err: unknown) => err instanceof TypeError && /round-trip through JSON/.test(err.message) && named.test(err.message.replace(/^.*?: /, "")),
          `state ${String(named)}`,
        );
      }
      assert.deepEqual(p.rpcs, []);
      assert.deepEqual(await p.executor.restore("turn-1"), []);
    } finally {
      p.close();
    }
  });

  it("refuses a timestamp that does not name one instant exactly, with a TypeError, and sends nothing", async () => {
    const p = new Process(sidecar, freshNamespace("bad-time"));
    const refused: unknown[] = [
      "2026-05-01T12:00:00", // no zone: another instant in every time zone
      "2026-05-01T12:00:00.000", // no zone
      "2026-05-01",
      "Fri, 01 May 2026 12:00:00 GMT",
      "2026-05-01T12:00:00.0000000001Z", // a tenth digit a timestamp cannot keep
      "2026-02-30T12:00:00Z",
      "2026-05-01T24:00:00Z",
      "2026-05-01T12:00:60Z",
      "",
      new Date(Date.UTC(2026, 4, 1)),
      Date.UTC(2026, 4, 1),
    ];
    try {
      for (const timestamp of refused) {
        await assert.rejects(
          p.executor.checkpoint({ turnId: "turn-1", sessionId: "s", phase: "started", state: {}, timestamp: timestamp as string }),
          (err: unknown) => err instanceof TypeError && /ISO-8601 date-time with its zone/.test(err.message),
          `timestamp ${JSON.stringify(timestamp)}`,
        );
      }
      assert.deepEqual(p.rpcs, []);
    } finally {
      p.close();
    }
  });

  it("restore() of a turn never checkpointed is an empty array", async () => {
    const p = new Process(sidecar, freshNamespace("unknown"));
    try {
      assert.deepEqual(await p.executor.restore("never-checkpointed"), []);
    } finally {
      p.close();
    }
  });
});

describe("the DurableExecutor contract across a sidecar crash, on the installed @stepwell/client", () => {
  it("checkpoints acknowledged before a SIGKILL restore after the restart in timestamp order; one attempted while it is down throws and is not stored", async () => {
    const sidecar = await startSidecar();
    const namespace = freshNamespace("crash");
    const running = new Process(sidecar, namespace);
    try {
      const turns = ["turn-a", "turn-b", "turn-c"].map((id) => turnOfSeven(id));
      // Each turn's checkpoints in flight together, in a scrambled order; turn-c's started names its instant with an offset.
      turns[2]![0]!.timestamp = "2026-05-01T12:00:00.000+02:00";
      await Promise.all(turns.flatMap((turn) => scrambled(turn.length).map((i) => running.executor.checkpoint(turn[i]!))));
      await sidecar.kill();
      const down = new Process(sidecar, namespace, { maxAttempts: 1, timeoutMs: 5000 });
      try {
        await assert.rejects(down.executor.checkpoint({ ...turns[0]![6]!, phase: "while-down", timestamp: at(100) }), StepwellError);
      } finally {
        down.close();
      }
      await sidecar.start();
      // The running process, on the client it had, adds a checkpoint between two stored ones.
      const late = { ...turns[0]![4]!, phase: "tool-received", state: { late: true }, timestamp: "2026-05-01T10:00:00.004500000Z" };
      await running.executor.checkpoint(late);
      const restarted = new Process(sidecar, namespace);
      try {
        const expected = [byInstant([...turns[0]!, late]), byInstant(turns[1]!), byInstant(turns[2]!)];
        expected[2]![0]!.timestamp = "2026-05-01T10:00:00.000Z";
        assert.deepEqual(await Promise.all(["turn-a", "turn-b", "turn-c"].map((id) => restarted.executor.restore(id))), expected);
      } finally {
        restarted.close();
      }
    } finally {
      running.close();
      await sidecar.stop();
    }
  });
});
