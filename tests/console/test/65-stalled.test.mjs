// Stalled turns: the sidecar runs with a stalled threshold of a few seconds,
// and the turn seeded first gets no checkpoint after its first. Once the
// threshold has passed (polled, not slept), the stalled filter lists it
// and not a turn written a moment ago; a checkpoint written to it then
// leaves a gap on its timeline longer than the threshold, marked as such.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { StepwellClient } from "../../../clients/typescript/dist/src/index.js";
import { fixture, launch, open, personContext, rowKeys, until, url } from "../lib/browser.mjs";

let browser;
let context;
let page;
let client;
before(async () => {
  browser = await launch();
  context = await personContext(browser, "reader");
  page = await context.newPage();
  client = new StepwellClient({ target: fixture.target, namespace: "alpha", token: fixture.tokens.admin });
});
after(async () => {
  client?.close();
  assert.deepEqual(context?.dialogs ?? [], []);
  await browser?.close();
});

test("the stalled filter lists a turn silent past the threshold, and not a fresh one", async () => {
  // By prefix: every seeded turn is stalled by now, and stalled-1, the oldest, is past the first page.
  const stalled = url("/turns", { ns: "alpha", stalled: "1", prefix: "stalled-" });
  await until(async () => {
    await open(page, stalled);
    return (await rowKeys(page, "turns", "turn")).includes("stalled-1");
  }, "stalled-1 to be listed as stalled", 120_000);
  assert.match(await page.locator('table#turns tr[data-turn="stalled-1"]').innerText(), /stalled/);
  await open(page, url("/turns", { ns: "alpha", stalled: "1", prefix: "terminal-" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), [], "a terminal turn is never stalled");

  const fresh = `fresh-${process.pid}`;
  await client.checkpoint({ turnId: fresh, phase: "start", state: {}, timestamp: new Date() });
  await open(page, url("/turns", { ns: "alpha", stalled: "1", prefix: "fresh-" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), []);
  await open(page, url("/turns", { ns: "alpha", status: "open", prefix: "fresh-" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), [fresh]);
  assert.doesNotMatch(await page.locator(`table#turns tr[data-turn="${fresh}"]`).innerText(), /stalled/);

  await open(page, url("/", { ns: "alpha" }));
  const count = await page.locator('section.namespace[data-ns="alpha"] dl').first().evaluate((dl) =>
    [...dl.querySelectorAll("dt")].find((dt) => dt.textContent.trim() === "Stalled turns")?.nextElementSibling.textContent.trim(),
  );
  assert.ok(Number(count) >= 1, `Stalled turns: ${count}`);
});

test("a silence longer than the threshold between two checkpoints is marked as a gap", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "stalled-1" }));
  assert.equal(await page.locator("table#checkpoints tr.gap").count(), 0);
  await client.checkpoint({ turnId: "stalled-1", phase: "resumed", state: {}, sessionId: "s-stalled", timestamp: new Date() });
  await open(page, url("/turn", { ns: "alpha", id: "stalled-1" }));
  const gap = page.locator("table#checkpoints tr.gap");
  assert.equal(await gap.count(), 1);
  assert.match(await gap.innerText(), /gap of/);
});
