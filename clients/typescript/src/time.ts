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

/** Whether the fields of an ISO match name a real date and time of day (no February 30, no second 60, an offset under 24 h). */
function validFields(m: RegExpExecArray): boolean {
  const [, y, mo, d, h, mi, s, , zone] = m;
  const year = +y!;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  const days = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31][+mo! - 1];
  if (days === undefined || +d! < 1 || +d! > days || +h! > 23 || +mi! > 59 || +s! > 59) return false;
  if (zone === "Z" || zone === "z") return true;
  const digits = zone!.slice(1).replace(":", "");
  return +digits.slice(0, 2) <= 23 && +digits.slice(2) <= 59;
}

/**
 * Parses an ISO-8601 date-time that names one instant exactly: with its zone
 * (`Z` or an offset such as `+02:00`) and at most 9 fractional digits, as
 * `Date.prototype.toISOString()` makes them. Throws a TypeError for anything
 * else: a string without a zone names a different instant in every time
 * zone, and digits past the ninth cannot be kept.
 */
export function isoInstant(s: unknown): Timestamp {
  const m = typeof s === "string" ? ISO.exec(s) : null;
  if (!m || !validFields(m)) {
    throw new TypeError(
      `timestamp must be an ISO-8601 date-time with its zone (Z or an offset like +02:00) and at most 9 fractional digits, as new Date().toISOString() gives; got ${typeof s === "string" ? JSON.stringify(s) : typeof s}`,
    );
  }
  return toTimestamp(s as string);
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
