// Group commit on the client side: concurrent puts of one shared saver (a
// server running many threads through one checkpointer) share PutRecords.
// A put goes at once while fewer than `inFlightMax` requests are out; the
// puts that come meanwhile wait, and the next request carries as many of
// them as fit (the same fence, no thread twice, within the byte and record
// budgets). Each put resolves only when the request carrying it committed,
// so nothing is acknowledged before the store has it; the per-call cost of
// a gRPC request in Node is paid once for many puts.
import type { RecordInit } from "./records.js";

export type Fence = { key: string; leaseToken: bigint };

interface Item {
  records: RecordInit[];
  fence: Fence | undefined;
  bytes: number;
  turns: Set<string>;
  resolve: () => void;
  reject: (err: unknown) => void;
}

export class PutCoalescer {
  private queue: Item[] = [];
  private inFlight = 0;

  constructor(
    private readonly send: (records: RecordInit[], fence: Fence | undefined) => Promise<void>,
    private readonly bytesMax: number,
    private readonly recordsMax: number,
    private readonly inFlightMax: number,
  ) {}

  /** Stores `records` (of `bytes` at most) in a request shared with other puts, or alone. */
  put(records: RecordInit[], fence: Fence | undefined, bytes: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const turns = new Set(records.map((r) => r.turnId ?? ""));
      this.queue.push({ records, fence, bytes, turns, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.inFlightMax && this.queue.length > 0) {
      const batch = this.take();
      this.inFlight += 1;
      void this.run(batch).finally(() => {
        this.inFlight -= 1;
        this.pump();
      });
    }
  }

  /** The first waiting put and those after it that fit with it. */
  private take(): Item[] {
    const first = this.queue.shift()!;
    const batch = [first];
    const turns = new Set(first.turns);
    let bytes = first.bytes;
    let count = first.records.length;
    const rest: Item[] = [];
    for (const item of this.queue) {
      const fits =
        sameFence(item.fence, first.fence) &&
        bytes + item.bytes <= this.bytesMax &&
        count + item.records.length <= this.recordsMax &&
        ![...item.turns].some((t) => turns.has(t));
      if (!fits) {
        rest.push(item);
        continue;
      }
      batch.push(item);
      bytes += item.bytes;
      count += item.records.length;
      for (const t of item.turns) turns.add(t);
    }
    this.queue = rest;
    return batch;
  }

  private async run(batch: Item[]): Promise<void> {
    try {
      await this.send(
        batch.flatMap((i) => i.records),
        batch[0].fence,
      );
      for (const item of batch) item.resolve();
    } catch (err) {
      if (batch.length === 1) return batch[0].reject(err);
      // One put's fault must not be another's: each is sent again alone for
      // a verdict of its own (its records are idempotent: upserted with the
      // same content, or inserted only if absent).
      await Promise.all(batch.map((i) => this.send(i.records, i.fence).then(i.resolve, i.reject)));
    }
  }
}

function sameFence(a: Fence | undefined, b: Fence | undefined): boolean {
  return a === b || (a !== undefined && b !== undefined && a.key === b.key && a.leaseToken === b.leaseToken);
}
