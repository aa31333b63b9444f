// How ADK sessions are laid out in stepwell's RecordService: the turn ids,
// record ids and payloads that the Python client's stepwell.adk writes, to
// the byte, so either language continues a session the other wrote.
//
// - session turn `adk:<app>/<user>/<session id>`: the head (kind
//   "adk-session", id "s", payload {"app","user","id","create_time",
//   "last_update_time"} in seconds, metadata {"app","user"}), one
//   "adk-event" record per event (id: its sequence number in 20 digits, 1
//   the first; payload ADK's camelCase event JSON, timestamp in seconds) and
//   one "adk-state" record per session-state key (id "k" + key, parent "s");
// - app turn `adk-app:<app>`: the app: keys without prefix, metadata
//   {"s":"app","app"}; user turn `adk-user:<app>/<user>`: the user: keys,
//   metadata {"s":"user","app","user"}.
// Names in turn ids are percent-encoded as Python's quote(name, safe="").
import { createEvent, type Event } from "@google/adk";
import { jsonBytes, parseJsonBytes } from "../client.js";
import { PutMode, type Record as StoredRecord } from "../gen/stepwell/v1/records_pb.js";

export const SESSION_KIND = "adk-session";
export const EVENT_KIND = "adk-event";
export const STATE_KIND = "adk-state";
export const HEAD_ID = "s";
export const KEY_PREFIX = "k";
export const TURN_BYTES_MAX = 256;
const ID_DIGITS = 20;
const CONTENT_TYPE = "application/json";

/** A name percent-encoded as Python's urllib.parse.quote(name, safe=""): every byte but A-Z a-z 0-9 _ . - ~. */
export function quoteName(name: string): string {
  return encodeURIComponent(name).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`);
}

function turn(prefix: string, ...names: string[]): string {
  const id = prefix + names.map(quoteName).join("/");
  if (Buffer.byteLength(id, "utf8") > TURN_BYTES_MAX) {
    throw new RangeError(`app name, user id and session id are too long for a stepwell turn id: ${JSON.stringify(id)}`);
  }
  return id;
}

export const sessionTurn = (app: string, user: string, id: string): string => turn("adk:", app, user, id);
export const appTurn = (app: string): string => turn("adk-app:", app);
export const userTurn = (app: string, user: string): string => turn("adk-user:", app, user);

/** The record id of event number `seq`. */
export function eventId(seq: bigint): string {
  return seq.toString().padStart(ID_DIGITS, "0");
}

/** Milliseconds from stored seconds; within a microsecond of a whole millisecond, that millisecond (seconds / 1000 * 1000 may miss it by a rounding step). */
export function msOf(seconds: number): number {
  const ms = seconds * 1000;
  const whole = Math.round(ms);
  return Math.abs(ms - whole) < 1e-3 ? whole : ms;
}

/** What a head record holds. */
export interface HeadInfo {
  app: string;
  user: string;
  id: string;
  create_time: number;
  last_update_time: number;
}

/** The head record of a session (times in seconds). */
export function headRecord(t: string, payload: HeadInfo, mode: PutMode) {
  return {
    turnId: t, scope: "", kind: SESSION_KIND, id: HEAD_ID, payload: jsonBytes(payload), contentType: CONTENT_TYPE,
    metadata: jsonBytes({ app: payload.app, user: payload.user }), mode,
  };
}

/** One upserted state record per key of `delta`. */
export function stateRecords(t: string, delta: Record<string, unknown>, meta: Record<string, string> | undefined, parent = "") {
  return Object.entries(delta).map(([key, value]) => ({
    turnId: t, scope: "", kind: STATE_KIND, id: KEY_PREFIX + key, parentId: parent, payload: jsonBytes(value),
    contentType: CONTENT_TYPE, metadata: meta ? jsonBytes(meta) : new Uint8Array(), mode: PutMode.UPSERT,
  }));
}

/** The state the records hold, by key. */
export function stateOf(records: Iterable<StoredRecord>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const r of records) out[r.id.slice(KEY_PREFIX.length)] = parseJsonBytes(r.payload);
  return out;
}

export const appMeta = (app: string) => ({ s: "app", app });
export const userMeta = (app: string, user: string) => ({ s: "user", app, user });

/** Splits a delta by scope: app: and user: keys without their prefix, temp: keys dropped, the rest the session's. */
export function splitDelta(delta: Record<string, unknown>): { app: Record<string, unknown>; user: Record<string, unknown>; session: Record<string, unknown> } {
  const out = { app: {} as Record<string, unknown>, user: {} as Record<string, unknown>, session: {} as Record<string, unknown> };
  for (const [key, value] of Object.entries(delta)) {
    if (key.startsWith("app:")) out.app[key.slice(4)] = value;
    else if (key.startsWith("user:")) out.user[key.slice(5)] = value;
    else if (!key.startsWith("temp:")) out.session[key] = value;
  }
  return out;
}

/** An event's stored payload: its JSON with the timestamp in seconds (undefined fields dropped, as JSON does). */
export function eventPayload(event: Event): Uint8Array {
  return jsonBytes({ ...event, timestamp: event.timestamp / 1000 });
}

/** An event read back from its payload, whichever language wrote it (its timestamp in ms). */
export function eventOf(payload: Uint8Array): Event {
  const raw = parseJsonBytes(payload) as Record<string, unknown>;
  return createEvent({ ...raw, timestamp: msOf(Number(raw.timestamp)) } as Parameters<typeof createEvent>[0]);
}

/** The record of event number `seq`, claimed with PUT_MODE_CREATE. */
export function eventRecord(t: string, seq: bigint, payload: Uint8Array) {
  return { turnId: t, scope: "", kind: EVENT_KIND, id: eventId(seq), payload, contentType: CONTENT_TYPE, mode: PutMode.CREATE };
}
