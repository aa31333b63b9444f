// getDeltaChannelHistory over the pages of one ListRecords: the thread's
// checkpoints up to the target, newest first, each with its writes and
// blobs. The walk follows the parent chain from the target (so a fork's
// other branches contribute nothing), collecting each ancestor's writes to
// the requested channels until it meets the nearest ancestor that stored the
// channel's value, the seed. It decodes only what it returns.
import type { CheckpointPendingWrite, DeltaChannelHistory } from "@langchain/langgraph-checkpoint";
import { EMPTY, type Codec, type Entry } from "./records.js";

export async function deltaHistory(
  pages: AsyncGenerator<Entry[]>,
  codec: Codec,
  channels: string[],
  targetId: string,
): Promise<Record<string, DeltaChannelHistory>> {
  const seen = new Map<string, Entry>();
  let more = true;
  let newest: Entry | undefined;
  /** The entry of a checkpoint, reading more pages while it is not yet seen. */
  const entry = async (id: string | undefined): Promise<Entry | undefined> => {
    while ((id === undefined ? newest === undefined : !seen.has(id)) && more) {
      const next = await pages.next();
      if (next.done) {
        more = false;
        break;
      }
      for (const e of next.value) {
        newest ??= e;
        seen.set(e.record.id, e);
      }
    }
    return id === undefined ? newest : seen.get(id);
  };

  const collected = new Map<string, CheckpointPendingWrite[]>(channels.map((ch) => [ch, []]));
  const seeds = new Map<string, unknown>();
  const remaining = new Set(channels);
  const target = await entry(targetId || undefined);
  let cursor = target?.record.parentId || undefined;
  while (cursor !== undefined && remaining.size > 0) {
    const e = await entry(cursor);
    if (e === undefined) break;
    const writes = await codec.pendingWrites(e.children, (ch) => remaining.has(ch));
    for (const ch of remaining) {
      const block = writes.filter((w) => w[1] === ch);
      collected.get(ch)!.push(...block.reverse());
    }
    for (const blob of e.refs) {
      const [ch] = JSON.parse(blob.id) as [string, string];
      if (!remaining.has(ch) || blob.contentType === EMPTY) continue;
      seeds.set(ch, await codec.value(blob));
      remaining.delete(ch);
    }
    cursor = e.record.parentId || undefined;
  }
  await pages.return(undefined);
  const out: Record<string, DeltaChannelHistory> = {};
  for (const ch of channels) {
    out[ch] = { writes: collected.get(ch)!.slice().reverse() };
    if (seeds.has(ch)) out[ch].seed = seeds.get(ch);
  }
  return out;
}
