// The stale-session check of StepwellSessionService, on SQLite and on
// Postgres: an append from a session object that another append has
// overtaken throws StaleSessionError and stores nothing, and reading the
// session again lets it append; an append sent again with the very event
// already stored (a retry whose answer was lost) succeeds without storing it
// twice; and of 20 appends racing from objects read at one revision, exactly
// one lands.
import { createEvent, type Event } from "@google/adk";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { StaleSessionError, type StepwellSessionService } from "../../src/adk/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, service, startBackend } from "./harness.js";

const KEY = { appName: "shop", userId: "ann", sessionId: "chat" };
const textEvent = (text: string): Event => createEvent({ author: "user", invocationId: "inv", content: { role: "user", parts: [{ text }] }, actions: { stateDelta: { last: text } } });
const texts = (events: Event[]) => events.map((e) => e.content?.parts?.[0]?.text);

for (const backend of BACKENDS) {
  describe(`stale sessions (${backend})`, () => {
    let sidecar: Sidecar;
    let sessions: StepwellSessionService;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
    });
    afterEach(() => sessions?.close());
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("refuses an append from an overtaken object, storing nothing, and takes it once the session is read again", async () => {
      sessions = service(sidecar, freshNamespace(`adk-stale-${backend}`));
      await sessions.createSession(KEY);
      const first = (await sessions.getSession(KEY))!;
      const second = (await sessions.getSession(KEY))!;
      await sessions.appendEvent({ session: first, event: textEvent("one") });
      await expect(sessions.appendEvent({ session: second, event: textEvent("two") })).rejects.toBeInstanceOf(StaleSessionError);
      expect(texts(second.events)).toEqual([]);
      const stored = (await sessions.getSession(KEY))!;
      expect([texts(stored.events), stored.state]).toEqual([["one"], { last: "one" }]);
      await sessions.appendEvent({ session: stored, event: textEvent("two") });
      expect(texts((await sessions.getSession(KEY))!.events)).toEqual(["one", "two"]);
    });

    it("takes a retried append of the event already stored without storing it twice", async () => {
      sessions = service(sidecar, freshNamespace(`adk-retry-${backend}`));
      await sessions.createSession(KEY);
      const a = (await sessions.getSession(KEY))!;
      const b = (await sessions.getSession(KEY))!;
      const event = textEvent("once");
      await sessions.appendEvent({ session: a, event: structuredClone(event) });
      // b stands for the same writer resending after a lost answer: the same event at the same revision.
      await sessions.appendEvent({ session: b, event: structuredClone(event) });
      expect(texts((await sessions.getSession(KEY))!.events)).toEqual(["once"]);
      await sessions.appendEvent({ session: b, event: textEvent("next") });
      expect(texts((await sessions.getSession(KEY))!.events)).toEqual(["once", "next"]);
    });

    it("lets exactly one of 20 racing appends from one revision land", async () => {
      sessions = service(sidecar, freshNamespace(`adk-race-${backend}`));
      await sessions.createSession(KEY);
      const objects = await Promise.all(Array.from({ length: 20 }, () => sessions.getSession(KEY)));
      const results = await Promise.allSettled(objects.map((s, i) => sessions.appendEvent({ session: s!, event: textEvent(`r${i}`) })));
      const landed = results.flatMap((r, i) => (r.status === "fulfilled" ? [`r${i}`] : []));
      expect(landed).toHaveLength(1);
      for (const r of results) if (r.status === "rejected") expect(r.reason).toBeInstanceOf(StaleSessionError);
      expect(texts((await sessions.getSession(KEY))!.events)).toEqual(landed);
    });
  });
}
