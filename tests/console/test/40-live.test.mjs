// Live refresh: a turn page left open shows a checkpoint written through
// the gRPC client after it loaded, without a reload (the page's own
// script re-fetches it), and the document it swapped into is the same one
// (a marker set on the window survives).
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { StepwellClient } from "../../../clients/typescript/dist/src/index.js";
import { fixture, launch, open, personContext, url } from "../lib/browser.mjs";

let browser;
let context;
before(async () => {
  browser = await launch();
  context = await personContext(browser, "reader");
});
after(async () => {
  assert.deepEqual(context?.dialogs ?? [], []);
  await browser?.close();
});

test("a checkpoint written while the turn page is open appears without a reload", async () => {
  const page = await context.newPage();
  await open(page, url("/turn", { ns: "alpha", id: "live-1" }));
  assert.equal(await page.locator("main#main[data-live]").count(), 1);
  const phase = `landed-${process.pid}`;
  assert.equal(await page.locator(`table#checkpoints tr[data-phase="${phase}"]`).count(), 0);
  await page.evaluate(() => (window.stepwellMarker = "same document"));

  const client = new StepwellClient({ target: fixture.target, namespace: "alpha", token: fixture.tokens.admin });
  try {
    await client.checkpoint({ turnId: "live-1", phase, state: { landed: true }, timestamp: new Date() });
  } finally {
    client.close();
  }
  await page.locator(`table#checkpoints tr[data-phase="${phase}"]`).waitFor({ timeout: 30_000 });
  assert.equal(await page.evaluate(() => window.stepwellMarker), "same document");
  await page.close();
});

test("the turns list refreshes too: a new turn appears in it", async () => {
  const page = await context.newPage();
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "live-" }));
  const turnId = `live-new-${process.pid}`;
  assert.equal(await page.locator(`table#turns tr[data-turn="${turnId}"]`).count(), 0);
  const client = new StepwellClient({ target: fixture.target, namespace: "alpha", token: fixture.tokens.admin });
  try {
    await client.checkpoint({ turnId, phase: "start", state: {}, timestamp: new Date() });
  } finally {
    client.close();
  }
  await page.locator(`table#turns tr[data-turn="${turnId}"]`).waitFor({ timeout: 30_000 });
  await page.close();
});
