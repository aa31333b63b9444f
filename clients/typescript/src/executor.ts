// StepwellDurableExecutor: the DurableExecutor seam (checkpoint / restore of
// a turn's lifecycle) backed by a stepwell sidecar.
import { StepwellClient, parseJsonBytes, type StepwellClientOptions } from "./client.js";
import { create } from "@bufbuild/protobuf";
import { TimestampSchema, type Timestamp } from "@bufbuild/protobuf/wkt";
import { timestampToIso, toTimestamp } from "./time.js";

export interface DurableExecutor {
  checkpoint(checkpoint: TurnCheckpoint): Promise<void>;
  restore(turnId: string): Promise<TurnCheckpoint[]>;
}

export interface TurnCheckpoint {
  turnId: string;
  sessionId: string;
  phase: string; // one of the registered CheckpointPhase names
  state: unknown; // JSON-serialisable; phase-specific shape
  timestamp: string; // ISO-8601; strictly monotonic per turn
}

export interface StepwellDurableExecutorOptions {
  /** A client to use (not closed by close()); otherwise one is made from clientOptions. */
  client?: StepwellClient;
  clientOptions?: StepwellClientOptions | string;
  /** Namespace of the turns (default: the client's). */
  namespace?: string;
  /** Recorded with each checkpoint when set, e.g. "1.3.0". */
  workflowVersion?: string;
  /** Phases that close the turn. Default ["settled"]. */
  terminalPhases?: readonly string[];
}

/** How many turns' floors, and how many (turn, phase, timestamp) stamps, an executor remembers. */
const MAX_TURNS = 4096;
const MAX_STAMPS = 16384;
const NS_PER_S = 1_000_000_000n;

function toNs(ts: Timestamp): bigint {
  return ts.seconds * NS_PER_S + BigInt(ts.nanos);
}

function fromNs(ns: bigint): Timestamp {
  let seconds = ns / NS_PER_S;
  let nanos = ns % NS_PER_S;
  if (nanos < 0n) {
    seconds -= 1n;
    nanos += NS_PER_S;
  }
  return create(TimestampSchema, { seconds, nanos: Number(nanos) });
}

/** Sets key to value as the most recently used entry, dropping the least recently used beyond max. */
function remember<K, V>(map: Map<K, V>, key: K, value: V, max: number): void {
  map.delete(key);
  map.set(key, value);
  while (map.size > max) map.delete(map.keys().next().value as K);
}

/**
 * A DurableExecutor whose checkpoint() returns once the sidecar has committed
 * the checkpoint (idempotent on (turnId, phase, timestamp)), and whose
 * restore() returns a turn's checkpoints oldest first (paging internally).
 * Timestamps come back as `Date.prototype.toISOString()` strings (9
 * fractional digits when they carry sub-millisecond precision). Failures throw
 * StepwellError.
 *
 * Skew-proof ordering: the sidecar orders a turn by timestamp, and callers
 * stamp checkpoints from their own clocks, which need not agree between
 * hosts. So the executor never stores a checkpoint at or below the newest
 * stored timestamp it has seen for the turn (its floor, raised by restore()
 * and by each checkpoint()). Before its first checkpoint of a turn it has not
 * restored, it reads the turn's newest checkpoint once (Restore newest first,
 * one item). A checkpoint whose timestamp is at or below the floor is stored
 * 1 ns above the floor instead, so a worker resuming a turn with a clock
 * behind the last writer's still writes the newest checkpoint, and restore()
 * lists checkpoints in the order they were made. The exception is a re-send:
 * a checkpoint with the phase and timestamp of one this executor stored or
 * restored is sent with the timestamp stored then, so it still deduplicates.
 * restore() returns the stored timestamps. The executor remembers the floors
 * of the last 4096 turns and the stamps of the last 16384 checkpoints it
 * stored or restored; a forgotten floor is read again, a re-send of a
 * forgotten checkpoint at or below the floor is stored as a new one.
 */
export class StepwellDurableExecutor implements DurableExecutor {
  readonly client: StepwellClient;
  private readonly ownsClient: boolean;
  private readonly namespace: string | undefined;
  private readonly workflowVersion: string | undefined;
  private readonly terminalPhases: ReadonlySet<string>;
  /** Per turn: the newest stored timestamp seen (ns since the epoch), or null when the turn had none. */
  private readonly floors = new Map<string, bigint | null>();
  /** (turn, phase, caller's timestamp in ns) -> the timestamp stored for it. */
  private readonly stamps = new Map<string, bigint>();
  /** Floor reads in flight, per turn. */
  private readonly floorReads = new Map<string, Promise<void>>();

  constructor(options: StepwellDurableExecutorOptions | StepwellClient = {}) {
    const o: StepwellDurableExecutorOptions = options instanceof StepwellClient ? { client: options } : options;
    this.ownsClient = !o.client;
    this.client = o.client ?? new StepwellClient(o.clientOptions ?? {});
    this.namespace = o.namespace;
    this.workflowVersion = o.workflowVersion;
    this.terminalPhases = new Set(o.terminalPhases ?? ["settled"]);
  }

  async checkpoint(checkpoint: TurnCheckpoint): Promise<void> {
    const turnId = checkpoint.turnId;
    const asked = toNs(toTimestamp(checkpoint.timestamp));
    const stampKey = JSON.stringify([turnId, checkpoint.phase, asked.toString()]);
    let stamp = this.stamps.get(stampKey);
    if (stamp === undefined) {
      if (!this.floors.has(turnId)) await this.readFloor(turnId);
      // Recheck: a concurrent call may have stored this very checkpoint meanwhile.
      stamp = this.stamps.get(stampKey);
      if (stamp === undefined) {
        const floor = this.floors.get(turnId) ?? null;
        stamp = floor !== null && asked <= floor ? floor + 1n : asked;
        remember(this.stamps, stampKey, stamp, MAX_STAMPS);
        this.raiseFloor(turnId, stamp);
      }
    } else {
      remember(this.stamps, stampKey, stamp, MAX_STAMPS);
    }
    await this.client.checkpoint(
      {
        turnId,
        sessionId: checkpoint.sessionId ?? "",
        phase: checkpoint.phase,
        state: checkpoint.state,
        timestamp: fromNs(stamp),
        terminal: this.terminalPhases.has(checkpoint.phase),
        workflowVersion: this.workflowVersion,
      },
      { namespace: this.namespace },
    );
  }

  async restore(turnId: string): Promise<TurnCheckpoint[]> {
    const stored = await this.client.restore(turnId, { namespace: this.namespace });
    let newest: bigint | null = null;
    for (const c of stored) {
      if (!c.timestamp) continue;
      const ns = toNs(c.timestamp);
      remember(this.stamps, JSON.stringify([turnId, c.phase, ns.toString()]), ns, MAX_STAMPS);
      if (newest === null || ns > newest) newest = ns;
    }
    if (newest !== null) this.raiseFloor(turnId, newest);
    else if (!this.floors.has(turnId)) this.setFloor(turnId, null);
    return stored.map((c) => ({
      turnId: c.turnId,
      sessionId: c.sessionId,
      phase: c.phase,
      state: parseJsonBytes(c.state),
      timestamp: c.timestamp ? timestampToIso(c.timestamp) : "",
    }));
  }

  /** Reads a turn's newest stored timestamp into its floor; concurrent callers share one read and resume in call order. */
  private readFloor(turnId: string): Promise<void> {
    let pending = this.floorReads.get(turnId);
    if (!pending) {
      pending = (async () => {
        try {
          const newest = await this.client.latest(turnId, { namespace: this.namespace });
          if (newest?.timestamp) this.raiseFloor(turnId, toNs(newest.timestamp));
          else if (!this.floors.has(turnId)) this.setFloor(turnId, null); // unless a restore() set it meanwhile
        } finally {
          this.floorReads.delete(turnId);
        }
      })();
      this.floorReads.set(turnId, pending);
    }
    return pending;
  }

  private setFloor(turnId: string, floor: bigint | null): void {
    remember(this.floors, turnId, floor, MAX_TURNS);
  }

  private raiseFloor(turnId: string, ns: bigint): void {
    const floor = this.floors.get(turnId);
    this.setFloor(turnId, floor === undefined || floor === null || ns > floor ? ns : floor);
  }

  /** Closes the client if this executor made it. */
  close(): void {
    if (this.ownsClient) this.client.close();
  }
}
