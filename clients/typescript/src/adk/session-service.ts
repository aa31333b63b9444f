// StepwellSessionService: Google ADK's BaseSessionService on stepwell's
// RecordService, so an ADK agent's sessions, events and app:/user:/session
// state outlive the process and are shared by every process (and language,
// see layout.ts) that names the same session. It keeps the semantics of
// ADK's InMemorySessionService (ids, numRecentEvents and afterTimestamp,
// listing and its pages, fresh copies returned, temp: keys never stored)
// and, being shared, refuses what that service cannot see: a create of an
// existing session (AlreadyExistsError), an append to a missing one
// (SessionNotFoundError) and an append from a session object another writer
// has overtaken (StaleSessionError).
import { BaseSessionService, createSession as newSession, type Event, type Session } from "@google/adk";
import type { AppendEventRequest, CreateSessionRequest, DeleteSessionRequest, GetSessionConfig, GetSessionRequest, ListSessionsRequest, ListSessionsResponse } from "@google/adk";
import { randomUUID } from "node:crypto";
import { StepwellClient, type StepwellClientOptions } from "../client.js";
import { RecordExists } from "../errors.js";
import { PutMode, type RecordEntry } from "../gen/stepwell/v1/records_pb.js";
import type { CallOptions } from "../options.js";
import * as L from "./layout.js";

/** How an append writes the session's head: the one place that says it. */
export const HEAD_APPEND_MODE: PutMode = PutMode.UPSERT;
const PAGE_SIZE = 1000;
const STALE_MESSAGE = "The session has been modified in storage since it was loaded. Please reload the session before appending more events.";

/** An append from a session object that another writer has overtaken: reload the session and append again. */
export class StaleSessionError extends Error {
  constructor(message = STALE_MESSAGE) {
    super(message);
    this.name = "StaleSessionError";
  }
}

/** createSession with the id of a session that exists. */
export class AlreadyExistsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "AlreadyExistsError";
  }
}

/** appendEvent to a session that does not exist (or was deleted). */
export class SessionNotFoundError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SessionNotFoundError";
  }
}

export interface StepwellSessionServiceOptions {
  /** The stepwell namespace of the sessions; default "default". */
  namespace?: string;
  /** Deadline of each call, in ms; default the client's. */
  timeoutMs?: number;
  /** The clock of createSession's times, in ms; default Date.now (a test or a replay may pin it). */
  now?: () => number;
  /** The id of a session created without one; default a random UUID, as ADK's. */
  newSessionId?: () => string;
}

/** What fromAddress() takes: the service's options and the client's connection options (token, tls, ...). */
export type StepwellSessionServiceAddressOptions = StepwellSessionServiceOptions & Omit<StepwellClientOptions, "target" | "namespace">;

/**
 * The newest stored event each session object has seen (its sequence
 * number): an append claims the next one, so an object another writer has
 * overtaken finds it taken. ADK's Session has no field for it.
 */
const markers = new WeakMap<Session, bigint>();

/** An ADK session service whose sessions live in stepwell (see the module comment). */
export class StepwellSessionService extends BaseSessionService {
  readonly client: StepwellClient;
  readonly namespace: string;
  private readonly ownsClient: boolean;
  private readonly opts: CallOptions;
  private readonly now: () => number;
  private readonly newSessionId: () => string;

  /** A service on `client`, which stays the caller's (close() leaves it open). */
  constructor(client: StepwellClient, options: StepwellSessionServiceOptions = {}, ownsClient = false) {
    super();
    this.client = client;
    this.namespace = options.namespace ?? "default";
    this.ownsClient = ownsClient;
    this.opts = { namespace: this.namespace, ...(options.timeoutMs === undefined ? {} : { timeoutMs: options.timeoutMs }) };
    this.now = options.now ?? Date.now;
    this.newSessionId = options.newSessionId ?? randomUUID;
  }

  /** A service on a client of its own to `target` (close() closes it), with the client's token, TLS and other options. */
  static fromAddress(target: string, options: StepwellSessionServiceAddressOptions = {}): StepwellSessionService {
    const { namespace, timeoutMs, now, newSessionId, ...clientOptions } = options;
    const client = new StepwellClient({ ...clientOptions, target, ...(timeoutMs === undefined ? {} : { timeoutMs }) });
    return new StepwellSessionService(client, { namespace, timeoutMs, now, newSessionId }, true);
  }

  /** Closes the client if the service made it (fromAddress); a client passed in stays open. */
  close(): void {
    if (this.ownsClient) this.client.close();
  }

  async createSession({ appName, userId, state, sessionId }: CreateSessionRequest): Promise<Session> {
    const id = sessionId || this.newSessionId();
    const t = L.sessionTurn(appName, userId, id);
    const delta = L.splitDelta(state ?? {});
    const now = this.now();
    const records = [
      L.headRecord(t, { app: appName, user: userId, id, create_time: now / 1000, last_update_time: now / 1000 }, PutMode.CREATE),
      ...this.deltaRecords(appName, userId, t, delta),
    ];
    try {
      await this.client.putRecords({ records }, this.opts);
    } catch (err) {
      if (err instanceof RecordExists) throw new AlreadyExistsError(`Session with id ${id} already exists.`);
      throw err;
    }
    const [app, user] = await Promise.all([this.scopedState(L.appTurn(appName)), this.scopedState(L.userTurn(appName, userId))]);
    const session = newSession({ id, appName, userId, state: merge(app, user, delta.session), events: [], lastUpdateTime: now });
    markers.set(session, 0n);
    return session;
  }

  async getSession({ appName, userId, sessionId, config }: GetSessionRequest): Promise<Session | undefined> {
    const t = L.sessionTurn(appName, userId, sessionId);
    // Events first: the state read after them is at least as new, and the
    // marker (the newest event's number) makes an append from this copy
    // stale if anything was appended since.
    const { events, marker } = await this.events(t, config);
    const [head, app, user] = await Promise.all([this.head(t), this.scopedState(L.appTurn(appName)), this.scopedState(L.userTurn(appName, userId))]);
    if (head === undefined) return undefined;
    const info = headInfo(head);
    const session = newSession({
      id: sessionId, appName, userId, state: merge(app, user, L.stateOf(head.children)), events,
      lastUpdateTime: L.msOf(info.last_update_time),
    });
    markers.set(session, marker);
    return session;
  }

  /** The events `config` selects, oldest first, as ADK's in-memory service selects them, and the newest event's number (0 when none). */
  private async events(t: string, config: GetSessionConfig | undefined): Promise<{ events: Event[]; marker: bigint }> {
    const n = config?.numRecentEvents;
    // A whole positive count is cut by the store; any other truthy count is
    // applied below as the in-memory service applies it (slice(-n)).
    const limit = n && Number.isInteger(n) && n > 0 ? n : undefined;
    // At least one record is read: the newest id is the session's revision.
    const entries = await this.list(L.EVENT_KIND, { turn: t, limit });
    const marker = entries.length > 0 ? BigInt(entries[0]!.record!.id) : 0n;
    let events = entries.map((e) => L.eventOf(e.record!.payload)).reverse();
    if (n) events = events.slice(-n);
    const after = config?.afterTimestamp;
    if (after) {
      let i = events.length - 1;
      while (i >= 0 && !(events[i]!.timestamp < after)) i--;
      if (i >= 0) events = events.slice(i + 1);
    }
    return { events, marker };
  }

  /** Sessions of the app (of one user when userId is given) without events or state, paged and ordered as the in-memory service does. */
  async listSessions({ appName, userId, limit, offset, page, order }: ListSessionsRequest): Promise<ListSessionsResponse> {
    const meta: Record<string, string> = userId === undefined ? { app: appName } : { app: appName, user: userId };
    const heads = await this.list(L.SESSION_KIND, { meta });
    const all = heads.map((h) => {
      const info = headInfo(h);
      return newSession({ id: info.id, appName, userId: info.user, state: {}, events: [], lastUpdateTime: L.msOf(info.last_update_time) });
    });
    // Without an order the in-memory service gives its insertion order; here, a stable one.
    all.sort((a, b) => a.lastUpdateTime - b.lastUpdateTime || cmp(a.userId, b.userId) || cmp(a.id, b.id));
    if (order === "asc") all.sort((a, b) => a.lastUpdateTime - b.lastUpdateTime || a.id.localeCompare(b.id));
    else if (order === "desc") all.sort((a, b) => b.lastUpdateTime - a.lastUpdateTime || a.id.localeCompare(b.id));
    return paginate(all, limit, offset, page);
  }

  async deleteSession({ appName, userId, sessionId }: DeleteSessionRequest): Promise<void> {
    await this.client.deleteRecords({ turnIds: [L.sessionTurn(appName, userId, sessionId)] }, this.opts);
  }

  /**
   * Stores the event and its state delta (temp: keys dropped) in one
   * PutRecords, claiming the event number after the newest one `session`
   * has seen, then applies it to `session` as ADK's base service does.
   */
  async appendEvent({ session, event }: AppendEventRequest): Promise<Event> {
    if (event.partial) return event;
    const t = L.sessionTurn(session.appName, session.userId, session.id);
    const head = await this.head(t);
    if (head === undefined) throw new SessionNotFoundError(`Session ${session.id} not found.`);
    const delta = L.splitDelta(event.actions?.stateDelta ?? {});
    const stored: Event = { ...event, actions: { ...event.actions, stateDelta: trimmed(event.actions?.stateDelta) } };
    const payload = L.eventPayload(stored);
    const seq = (await this.revision(session, t)) + 1n;
    const info = headInfo(head);
    const records = [
      L.eventRecord(t, seq, payload),
      L.headRecord(t, { ...info, last_update_time: event.timestamp / 1000 }, HEAD_APPEND_MODE),
      ...this.deltaRecords(session.appName, session.userId, t, delta),
    ];
    try {
      await this.client.putRecords({ records }, this.opts);
    } catch (err) {
      if (!(err instanceof RecordExists)) throw err;
      if (!(await this.storedAs(t, seq, payload))) throw new StaleSessionError();
    }
    markers.set(session, seq);
    await super.appendEvent({ session, event });
    session.lastUpdateTime = event.timestamp;
    return event;
  }

  /** The records of a delta split by scope: session keys under the head, app: and user: keys in their turns. */
  private deltaRecords(app: string, user: string, t: string, delta: ReturnType<typeof L.splitDelta>) {
    return [
      ...L.stateRecords(t, delta.session, undefined, L.HEAD_ID),
      ...L.stateRecords(L.appTurn(app), delta.app, L.appMeta(app)),
      ...L.stateRecords(L.userTurn(app, user), delta.user, L.userMeta(app, user)),
    ];
  }

  /**
   * The number of the newest event `session` has seen. An object this
   * service did not return carries no marker: it is current only when its
   * last event is the newest stored.
   */
  private async revision(session: Session, t: string): Promise<bigint> {
    const known = markers.get(session);
    if (known !== undefined) return known;
    const newest = (await this.list(L.EVENT_KIND, { turn: t, limit: 1 }))[0]?.record;
    if (newest === undefined) {
      if (session.events.length > 0) throw new StaleSessionError();
      return 0n;
    }
    if (session.events.at(-1)?.id !== L.eventOf(newest.payload).id) throw new StaleSessionError();
    return BigInt(newest.id);
  }

  /** Whether event `seq` is this very payload: a retried request whose first attempt committed (its answer lost) finds its own event, and is done. */
  private async storedAs(t: string, seq: bigint, payload: Uint8Array): Promise<boolean> {
    const page = await this.client.listRecords({ turnId: t, hasScope: true, scope: "", kind: L.EVENT_KIND, id: L.eventId(seq), pageSize: 1 }, this.opts);
    const got = page.entries[0]?.record?.payload;
    return got !== undefined && Buffer.from(got).equals(Buffer.from(payload));
  }

  private async head(t: string): Promise<RecordEntry | undefined> {
    return (await this.list(L.SESSION_KIND, { turn: t, limit: 1, children: L.STATE_KIND }))[0];
  }

  private async scopedState(t: string): Promise<Record<string, unknown>> {
    return L.stateOf((await this.list(L.STATE_KIND, { turn: t })).map((e) => e.record!));
  }

  /** Entries of `kind`, newest id first: at most `limit` (every one when undefined). */
  private async list(kind: string, o: { turn?: string; limit?: number; meta?: Record<string, string>; children?: string }): Promise<RecordEntry[]> {
    const got: RecordEntry[] = [];
    let pageToken = "";
    do {
      const pageSize = o.limit === undefined ? PAGE_SIZE : Math.min(o.limit - got.length, PAGE_SIZE);
      const page = await this.client.listRecords({
        turnId: o.turn ?? "", hasScope: true, scope: "", kind, pageSize, pageToken,
        metadataContains: o.meta ? Buffer.from(JSON.stringify(o.meta)) : new Uint8Array(), childrenKind: o.children ?? "",
      }, this.opts);
      got.push(...page.entries);
      pageToken = page.nextPageToken;
    } while (pageToken !== "" && (o.limit === undefined || got.length < o.limit));
    return got;
  }
}

function headInfo(entry: RecordEntry): L.HeadInfo {
  return JSON.parse(Buffer.from(entry.record!.payload).toString("utf8")) as L.HeadInfo;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** The state delta without temp: keys (a copy: the event itself is trimmed by ADK's base service once stored). */
function trimmed(delta: Record<string, unknown> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(delta ?? {})) if (!key.startsWith("temp:")) out[key] = value;
  return out;
}

/** Session state with the app's keys as "app:" and the user's as "user:" (they win, as ADK merges). */
function merge(app: Record<string, unknown>, user: Record<string, unknown>, session: Record<string, unknown>): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...session };
  for (const [k, v] of Object.entries(app)) merged[`app:${k}`] = v;
  for (const [k, v] of Object.entries(user)) merged[`user:${k}`] = v;
  return merged;
}

/** A page of `all` as the in-memory service computes it from limit, offset and page. */
function paginate(all: Session[], limit?: number, offset?: number, page?: number): ListSessionsResponse {
  const totalItems = all.length;
  if (limit === undefined) {
    return { sessions: offset ? all.slice(offset) : all, page: 1, limit: totalItems, totalItems, totalPages: totalItems === 0 ? 0 : 1 };
  }
  const start = page !== undefined ? (page - 1) * limit : (offset ?? 0);
  const effectivePage = page !== undefined ? page : limit === 0 ? 1 : Math.floor(start / limit) + 1;
  const totalPages = limit === 0 ? 0 : Math.ceil(totalItems / limit);
  return { sessions: all.slice(start, start + limit), page: effectivePage, limit, totalItems, totalPages };
}
