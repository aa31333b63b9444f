// Fencing of a LangGraph thread: the lease a saver holds on a thread through
// the idempotency service (Begin on "langgraph-thread:" + thread_id, the
// same key the Python saver leases, so the two languages fence each other),
// and the fence every PutRecords of the thread carries. The sidecar refuses a
// put whose lease is no longer the holder's, so two workers running one
// thread never fork its history: the second gets ThreadBusy before anything
// of it is stored, and a worker whose lease was taken over gets LeaseLost.
import { createHash } from "node:crypto";
import type { StepwellClient } from "../client.js";
import { LeaseLost, NotAcquired, StepwellError, ThreadBusy } from "../errors.js";
import { BeginOutcome, type BeginResponse } from "../gen/stepwell/v1/idempotency_pb.js";
import type { CallOptions } from "../options.js";
import { timestampToIso } from "../time.js";

const LEASE_KEY_PREFIX = "langgraph-thread:";
const LEASE_KEY_BYTES_MAX = 256;
const FAILED_PRECONDITION = 9;

/** The idempotency key a fenced saver leases for a thread (the Python saver's too). */
export function threadLeaseKey(threadId: string): string {
  const key = LEASE_KEY_PREFIX + threadId;
  if (Buffer.byteLength(key) <= LEASE_KEY_BYTES_MAX) return key;
  return "langgraph-thread-sha256:" + createHash("sha256").update(threadId, "utf8").digest("hex");
}

/**
 * A thread's lease as a saver holds it: the key, the fencing token every put
 * of the thread carries, and `lost`, set when the heartbeat found the lease
 * taken over (the thread's puts are then refused with LeaseLost).
 */
export interface ThreadLease {
  readonly threadId: string;
  readonly key: string;
  readonly token: bigint;
  lost: boolean;
}

interface Held extends ThreadLease {
  /** Begin's attempt: the next one on the key is ours again only if no one else leased the thread in between. */
  attempt: number;
  extendedAt: number;
  /** Open threadLease() calls; while any is open a heartbeat extends the lease. */
  holds: number;
  heartbeat?: NodeJS.Timeout;
}

/** The leases of one saver, by thread. */
export class Leases {
  private readonly held = new Map<string, Held>();
  /** Begins under way, so concurrent puts of one thread share one Begin. */
  private readonly beginning = new Map<string, Promise<Held>>();
  /** Extends under way, so concurrent puts of one thread share one Extend (and one Begin when it lapsed). */
  private readonly extending = new Map<Held, Promise<Held>>();

  constructor(
    private readonly client: StepwellClient,
    private readonly fenced: boolean,
    private readonly leaseMs: number,
    private readonly opts: CallOptions,
  ) {}

  /** The lease a put of the thread is fenced with: none unless fenced or held; taken or extended as needed. */
  async fence(threadId: string): Promise<ThreadLease | undefined> {
    let lease = this.held.get(threadId);
    if (lease === undefined) {
      if (!this.fenced && !this.beginning.has(threadId)) return undefined;
      lease = await this.acquire(threadId);
    } else if (lease.holds === 0 && Date.now() - lease.extendedAt > this.leaseMs / 3) {
      const held = lease;
      let p = this.extending.get(held);
      if (p === undefined) {
        p = this.extendOrRenew(threadId, held).finally(() => this.extending.delete(held));
        this.extending.set(held, p);
      }
      lease = await p;
    }
    return lease;
  }

  /**
   * Extends a lease a put took. If it lapsed (a run paused at interrupt()
   * longer than the lease, say), the thread is leased again, but only when
   * no one else leased it in between, which the key's attempt tells: then no
   * other worker's put reached the thread, and the run may go on. Otherwise
   * the lease was taken over, and the put fails with LeaseLost.
   */
  private async extendOrRenew(threadId: string, lease: Held): Promise<Held> {
    try {
      await this.client.extend(lease.key, lease.token, this.leaseMs, this.opts);
      lease.extendedAt = Date.now();
      return lease;
    } catch (err) {
      if (!(err instanceof LeaseLost || err instanceof NotAcquired)) throw err;
      const r = await this.client.begin(lease.key, { ...this.opts, leaseMs: this.leaseMs });
      if (r.outcome === BeginOutcome.ACQUIRED) {
        const renewed = leased(threadId, lease.key, r);
        if (r.attempt === lease.attempt + 1) {
          this.held.set(threadId, renewed);
          return renewed;
        }
        // Another worker held the thread since: this run's view of it may be stale.
        await this.release(renewed);
      }
      throw err;
    }
  }

  /** After a put was refused for its lease: a lease a put took is forgotten, so a later run asks again. */
  refused(threadId: string, lease: ThreadLease): void {
    const held = this.held.get(threadId);
    if (held === lease && held.holds === 0) this.held.delete(threadId);
  }

  /** Holds the thread's lease around fn, extending it every leaseMs/3, and releases it after. */
  async hold<T>(threadId: string, fn: (lease: ThreadLease) => Promise<T> | T): Promise<T> {
    const lease = this.held.get(threadId) ?? (await this.acquire(threadId));
    lease.holds += 1;
    if (lease.holds === 1) this.startHeartbeat(lease);
    try {
      return await fn(lease);
    } finally {
      lease.holds -= 1;
      if (lease.holds === 0) {
        clearInterval(lease.heartbeat);
        if (this.held.get(threadId) === lease) this.held.delete(threadId);
        await this.release(lease);
      }
    }
  }

  /** Releases every lease held (for close()). */
  async releaseAll(): Promise<void> {
    const all = [...this.held.values()];
    this.held.clear();
    for (const lease of all) {
      clearInterval(lease.heartbeat);
      await this.release(lease);
    }
  }

  private acquire(threadId: string): Promise<Held> {
    let p = this.beginning.get(threadId);
    if (p === undefined) {
      p = this.begin(threadId).finally(() => this.beginning.delete(threadId));
      this.beginning.set(threadId, p);
    }
    return p;
  }

  private async begin(threadId: string): Promise<Held> {
    const key = threadLeaseKey(threadId);
    const r = await this.client.begin(key, { ...this.opts, leaseMs: this.leaseMs });
    const lease = leased(threadId, key, r);
    this.held.set(threadId, lease);
    return lease;
  }

  private startHeartbeat(lease: Held): void {
    lease.heartbeat = setInterval(() => {
      this.client.extend(lease.key, lease.token, this.leaseMs, this.opts).then(
        () => {
          lease.extendedAt = Date.now();
        },
        (err: unknown) => {
          if (err instanceof LeaseLost || err instanceof NotAcquired) {
            lease.lost = true;
            clearInterval(lease.heartbeat);
          }
          // anything else is transient: the next beat tries again
        },
      );
    }, Math.max(10, Math.floor(this.leaseMs / 3)));
    lease.heartbeat.unref?.();
  }

  private async release(lease: ThreadLease): Promise<void> {
    try {
      await this.client.release(lease.key, lease.token, this.opts);
    } catch (err) {
      if (!(err instanceof LeaseLost || err instanceof NotAcquired)) throw err;
      // another worker took it over: nothing of ours to release
    }
  }
}

/** Begin's answer as a lease, or ThreadBusy when another worker holds the thread. */
function leased(threadId: string, key: string, r: BeginResponse): Held {
  if (r.outcome === BeginOutcome.ACQUIRED) {
    return { threadId, key, token: r.leaseToken, attempt: r.attempt, lost: false, extendedAt: Date.now(), holds: 0 };
  }
  if (r.outcome === BeginOutcome.IN_PROGRESS) {
    const until = r.leaseExpiresAt ? timestampToIso(r.leaseExpiresAt) : "";
    throw new ThreadBusy(`thread ${JSON.stringify(threadId)} is being run by another worker${until ? ` (its lease runs until ${until})` : ""}`, {
      grpcCode: FAILED_PRECONDITION,
      reason: "IN_PROGRESS",
      metadata: { key, thread_id: threadId, lease_expires_at: until },
    });
  }
  throw new StepwellError(`the lease key ${JSON.stringify(key)} of thread ${JSON.stringify(threadId)} was completed or failed by another user of the key`, {
    grpcCode: FAILED_PRECONDITION,
    reason: BeginOutcome[r.outcome],
    metadata: { key, thread_id: threadId },
  });
}
