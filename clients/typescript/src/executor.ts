// StepwellDurableExecutor: the DurableExecutor seam (checkpoint / restore of
// a turn's lifecycle) backed by a stepwell sidecar.
import { StepwellClient, parseJsonBytes, type StepwellClientOptions } from "./client.js";
import { assertJsonState } from "./json-state.js";
import { isoInstant, timestampToIso } from "./time.js";

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

/**
 * A DurableExecutor whose checkpoint() returns once the sidecar has committed
 * the checkpoint, and whose restore() returns a turn's checkpoints oldest
 * first (paging internally).
 *
 * The caller's timestamp is the checkpoint's: checkpoint() stores it exactly
 * as given, the instant the string names at full nanosecond precision
 * (`2026-05-01T12:00:00.000+02:00` is 10:00 UTC), and sends nothing but the
 * one Checkpoint call. So checkpoint() is idempotent on (turnId, phase,
 * timestamp) whichever executor or process sends the tuple (the sidecar
 * stores it once), and restore() returns a turn in timestamp order (the
 * sidecar's order), however the calls interleaved. Ordering is the caller's,
 * as the contract says: the session manager keeps timestamps strictly
 * monotonic per turn; the executor does not restamp, so it needs no memory
 * of what it sent.
 *
 * checkpoint() refuses with a TypeError, before sending anything, a
 * timestamp that does not name one instant exactly (no zone, or more than 9
 * fractional digits: see isoInstant) and a state that does not round-trip
 * through JSON (a Map, a Date, a class instance, a function, a bigint, NaN,
 * a cycle, ...), which JSON.stringify would otherwise store altered. A
 * checkpoint with the tuple of a stored one but another state or sessionId
 * fails CheckpointConflict and changes nothing. Timestamps come back as
 * `Date.prototype.toISOString()` strings in UTC (9 fractional digits when
 * they carry sub-millisecond precision). The sidecar's failures throw
 * StepwellError.
 */
export class StepwellDurableExecutor implements DurableExecutor {
  readonly client: StepwellClient;
  private readonly ownsClient: boolean;
  private readonly namespace: string | undefined;
  private readonly workflowVersion: string | undefined;
  private readonly terminalPhases: ReadonlySet<string>;

  constructor(options: StepwellDurableExecutorOptions | StepwellClient = {}) {
    const o: StepwellDurableExecutorOptions = options instanceof StepwellClient ? { client: options } : options;
    this.ownsClient = !o.client;
    this.client = o.client ?? new StepwellClient(o.clientOptions ?? {});
    this.namespace = o.namespace;
    this.workflowVersion = o.workflowVersion;
    this.terminalPhases = new Set(o.terminalPhases ?? ["settled"]);
  }

  async checkpoint(checkpoint: TurnCheckpoint): Promise<void> {
    // Both checks come first, so a checkpoint that cannot be stored as given is never stored at all.
    const timestamp = isoInstant(checkpoint.timestamp);
    assertJsonState(checkpoint.state);
    await this.client.checkpoint(
      {
        turnId: checkpoint.turnId,
        sessionId: checkpoint.sessionId ?? "",
        phase: checkpoint.phase,
        state: checkpoint.state,
        timestamp,
        terminal: this.terminalPhases.has(checkpoint.phase),
        workflowVersion: this.workflowVersion,
      },
      { namespace: this.namespace },
    );
  }

  async restore(turnId: string): Promise<TurnCheckpoint[]> {
    const stored = await this.client.restore(turnId, { namespace: this.namespace });
    return stored.map((c) => ({
      turnId: c.turnId,
      sessionId: c.sessionId,
      phase: c.phase,
      state: parseJsonBytes(c.state),
      timestamp: c.timestamp ? timestampToIso(c.timestamp) : "",
    }));
  }

  /** Closes the client if this executor made it. */
  close(): void {
    if (this.ownsClient) this.client.close();
  }
}
