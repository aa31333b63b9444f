// StepwellDurableExecutor: the DurableExecutor seam (checkpoint / restore of
// a turn's lifecycle) backed by a stepwell sidecar.
import { StepwellClient, parseJsonBytes, type StepwellClientOptions } from "./client.js";
import { timestampToIso } from "./time.js";

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
 * the checkpoint (idempotent on (turnId, phase, timestamp)), and whose
 * restore() returns a turn's checkpoints oldest first (paging internally).
 * Timestamps come back as `Date.prototype.toISOString()` strings (9
 * fractional digits when they carry sub-millisecond precision). Failures throw
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
    await this.client.checkpoint(
      {
        turnId: checkpoint.turnId,
        sessionId: checkpoint.sessionId ?? "",
        phase: checkpoint.phase,
        state: checkpoint.state,
        timestamp: checkpoint.timestamp,
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
