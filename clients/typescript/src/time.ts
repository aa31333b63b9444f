// Conversions between ISO-8601 strings / Dates / milliseconds and
// google.protobuf.Timestamp and Duration, at full nanosecond precision.
import { create } from "@bufbuild/protobuf";
import {
  DurationSchema,
  TimestampSchema,
  type Duration,
  type Timestamp,
} from "@bufbuild/protobuf/wkt";

const ISO =
  /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:[.,](\d{1,9}))?(Z|z|[+-]\d{2}:?\d{2})$/;

/** A timestamp as the API accepts it: an ISO-8601 string, a Date, or a Timestamp. */
export type TimeLike = string | Date | Timestamp;

/** Parses an ISO-8601 / RFC 3339 timestamp (nanoseconds kept) into a Timestamp. */
export function toTimestamp(t: TimeLike): Timestamp {
  if (t instanceof Date) {
    const ms = t.getTime();
    if (Number.isNaN(ms)) throw new TypeError("invalid Date");
    return msToTimestamp(ms);
  }
  if (typeof t !== "string") return t;
  const m = ISO.exec(t);
  if (m) {
    const [, y, mo, d, h, mi, s, frac, zone] = m;
    let seconds = Date.UTC(+y!, +mo! - 1, +d!, +h!, +mi!, +s!) / 1000;
    if (+y! < 100) {
      // Date.UTC maps years 0..99 to 1900..1999
      const dt = new Date(0);
      dt.setUTCFullYear(+y!, +mo! - 1, +d!);
      dt.setUTCHours(+h!, +mi!, +s!, 0);
      seconds = dt.getTime() / 1000;
    }
    if (zone !== "Z" && zone !== "z") {
      const sign = zone!.startsWith("-") ? -1 : 1;
      const digits = zone!.slice(1).replace(":", "");
      seconds -= sign * (+digits.slice(0, 2) * 3600 + +digits.slice(2) * 60);
    }
    const nanos = frac ? +frac.padEnd(9, "0") : 0;
    return create(TimestampSchema, { seconds: BigInt(seconds), nanos });
  }
  const ms = Date.parse(t);
  if (Number.isNaN(ms)) throw new TypeError(`not an ISO-8601 timestamp: ${JSON.stringify(t)}`);
  return msToTimestamp(ms);
}

function msToTimestamp(ms: number): Timestamp {
  const seconds = Math.floor(ms / 1000);
  return create(TimestampSchema, {
    seconds: BigInt(seconds),
    nanos: (ms - seconds * 1000) * 1_000_000,
  });
}

/**
 * Formats a Timestamp as ISO-8601 UTC: exactly `Date.prototype.toISOString()`
 * (millisecond precision) when it has no sub-millisecond part, else with 9
 * fractional digits.
 */
export function timestampToIso(ts: Timestamp): string {
  const ms = Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000);
  const iso = new Date(ms).toISOString();
  if (ts.nanos % 1_000_000 === 0) return iso;
  return iso.slice(0, iso.indexOf(".")) + "." + String(ts.nanos).padStart(9, "0") + "Z";
}

/** A Timestamp as a Date (millisecond precision). */
export function timestampToDate(ts: Timestamp): Date {
  return new Date(Number(ts.seconds) * 1000 + Math.floor(ts.nanos / 1_000_000));
}

/** Milliseconds as a google.protobuf.Duration. */
export function msToDuration(ms: number): Duration {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`invalid duration: ${ms} ms`);
  const seconds = Math.floor(ms / 1000);
  return create(DurationSchema, {
    seconds: BigInt(seconds),
    nanos: Math.round((ms - seconds * 1000) * 1_000_000),
  });
}
