// Runs that live in records, seeded through the real Python integrations
// (lib/seed_runs.py): a LangGraph thread paused at interrupt() and one that
// finished, an Agents SDK session and an ADK session. The Turns page lists
// them with their kind and state, and a turn that holds only waits too; the
// overview counts them; the stalled rule sees the paused thread and never a
// thread or session at rest; a thread's page draws its tree with the
// pending interrupt's value, a session's page its items in order; and
// deleting a thread from the console deletes its records, says how many
// before and after, and leaves nothing behind.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { StepwellClient } from "../../../clients/typescript/dist/src/index.js";
import { fixture, launch, open, personContext, rowKeys, until, url } from "../lib/browser.mjs";

const { runs } = fixture;
let browser;
let admin;
let reader;
let client;
before(async () => {
  browser = await launch();
  admin = await personContext(browser, "admin");
  reader = await personContext(browser, "reader");
  client = new StepwellClient({ target: fixture.target, namespace: "alpha", token: fixture.tokens.admin });
});
after(async () => {
  client?.close();
  assert.deepEqual([...(admin?.dialogs ?? []), ...(reader?.dialogs ?? [])], []);
  await browser?.close();
});

/** The row of turn `id` on the Turns page filtered by `query`, as its kind and status cells. */
async function runRow(page, id, query = {}) {
  await open(page, url("/turns", { ns: "alpha", prefix: id, ...query }));
  const row = page.locator(`table#turns tr[data-turn="${id}"]`);
  if ((await row.count()) === 0) return null;
  const text = await row.evaluate((tr) => [...tr.cells].map((td) => td.textContent.trim()));
  return { kind: text[1], holds: text[2], status: text[6] };
}

test("every turn that holds anything is listed, with the kind of run it is", async () => {
  const page = await reader.newPage();
  const thread = await runRow(page, runs.pending_thread);
  assert.equal(thread?.kind, "LangGraph thread");
  assert.match(thread.holds, /records/);
  assert.match(thread.holds, /interrupt pending/);
  assert.match(thread.status, /interrupted|stalled/);
  const done = await runRow(page, runs.done_thread);
  assert.equal(done?.kind, "LangGraph thread");
  assert.equal(done.status, "at rest");
  assert.equal((await runRow(page, runs.agents_session))?.kind, "Agents SDK session");
  assert.equal((await runRow(page, runs.adk_turn))?.kind, "ADK session");
  const waitsOnly = await runRow(page, "act-wait");
  assert.equal(waitsOnly?.kind, "waits only");
  assert.match(waitsOnly.holds, /waits \(\d+ pending\)/);

  await open(page, url("/turns", { ns: "alpha", kind: "langgraph" }));
  const threads = await rowKeys(page, "turns", "turn");
  assert.ok(threads.includes(runs.pending_thread) && threads.includes(runs.done_thread), `${threads}`);
  assert.ok(!threads.includes("open-1") && !threads.includes(runs.agents_session), `${threads}`);
  await open(page, url("/turns", { ns: "alpha", kind: "nonsense" }), 400);
  await page.close();
});

test("the overview counts runs in records, and the stalled rule sees the paused thread only", async () => {
  const page = await reader.newPage();
  await open(page, url("/", { ns: "alpha" }));
  const count = await page.locator('section.namespace[data-ns="alpha"] dd[id^="record-runs"]').innerText();
  assert.ok(Number(count) >= 4, `threads and sessions: ${count}`);
  await until(async () => (await runRow(page, runs.pending_thread, { stalled: "1" })) !== null, "the paused thread to stall", 120_000);
  for (const id of [runs.done_thread, runs.agents_session, runs.adk_turn]) {
    assert.equal(await runRow(page, id, { stalled: "1" }), null, `${id} is at rest, never stalled`);
  }
  // Longest stalled first: on the stalled filter, and above the unfiltered page.
  await open(page, url("/turns", { ns: "alpha", stalled: "1" }));
  const times = await page.locator("table#turns tbody tr td:nth-child(6)").allInnerTexts();
  assert.ok(times.length > 1, `${times}`);
  assert.deepEqual(times, [...times].sort(), "the stalled runs come oldest activity first");
  const longest = (await rowKeys(page, "turns", "turn"))[0];
  await open(page, url("/turns", { ns: "alpha" }));
  const shown = await rowKeys(page, "stalled", "turn");
  assert.ok(shown.length > 0 && shown.length <= 10, `${shown}`);
  // Other files' tests write to the namespace meanwhile: the longest stalled may have moved on, never the order.
  const above = await page.locator("table#stalled tbody tr td:nth-child(6)").allInnerTexts();
  assert.deepEqual(above, [...above].sort(), "the unfiltered page shows the longest stalled on top, oldest first");
  assert.ok(shown.includes(longest) || shown.length === 10, `${longest} among ${shown}`);
  await page.close();
});

test("a thread's page draws its tree with the pending interrupt, and a session's page its items in order", async () => {
  const page = await reader.newPage();
  await open(page, url("/turn", { ns: "alpha", id: runs.pending_thread }));
  assert.match(await page.locator("#run").innerText(), /LangGraph thread/);
  const interrupt = page.locator("#checkpoint-tree li.interrupt");
  assert.equal(await interrupt.count(), 1);
  assert.match(await interrupt.innerText(), /interrupt pending/);
  assert.match(await interrupt.innerText(), /Refund 40 EUR\?/, "the interrupt's value, decoded");
  assert.match(await page.locator("#checkpoint-tree").innerText(), /step -?\d+/);

  await open(page, url("/turn", { ns: "alpha", id: runs.agents_session }));
  const agents = await page.locator("#items ol.items li").allInnerTexts();
  assert.equal(agents.length, 2, `${agents}`);
  assert.match(agents[0], /^user\s*Where is my order 1042\?/);
  assert.match(agents[1], /^assistant\s*It left the warehouse/);

  await open(page, url("/turn", { ns: "alpha", id: runs.adk_turn }));
  const events = await page.locator("#items ol.items li").allInnerTexts();
  assert.equal(events.length, 2, `${events}`);
  assert.match(events[0], /^user\s*Cancel my subscription/);
  assert.match(events[1], /^support_agent\s*Done: it ends on the 30th\./);
  await page.close();
});

test("deleting a thread deletes its records, and says how much before and after", async () => {
  const page = await admin.newPage();
  const id = runs.done_thread;
  const before = await client.listRecords({ turnId: id, kind: "checkpoint" });
  assert.ok(before.entries.length > 0, "the finished thread holds records");
  await open(page, url("/turn", { ns: "alpha", id }));
  await Promise.all([
    page.waitForResponse((r) => new URL(r.url()).pathname === "/actions/delete-turn"),
    page.getByRole("button", { name: "Delete this turn" }).click(),
  ]);
  const question = await page.locator("#question").innerText();
  assert.match(question, /0 checkpoints, \d+ records and 0 waits/, question);
  await Promise.all([page.waitForURL((u) => u.pathname === "/turns"), page.getByRole("button", { name: "Confirm" }).click()]);
  const notice = await page.locator("#notice").innerText();
  assert.match(notice, /deleted with everything it held: 0 checkpoints, [1-9]\d* records and 0 waits/, notice);
  for (const kind of ["checkpoint", "write", "blob"]) {
    assert.deepEqual((await client.listRecords({ turnId: id, kind })).entries, [], `no ${kind} record of the thread is left`);
  }
  await open(page, url("/turn", { ns: "alpha", id }), 404);
  await page.close();
});

test("the navigation keeps a namespace the viewer may read", async () => {
  const page = await reader.newPage();
  await open(page, "/");
  for (const name of ["Turns", "Keys", "Waits"]) {
    const href = await page.locator("header nav").getByRole("link", { name, exact: true }).getAttribute("href");
    assert.equal(new URL(href, fixture.base).searchParams.get("ns"), "alpha", `${name}: ${href}`);
    await open(page, href);
  }
  await page.close();
});

test("waits and keys link to their turn, and long keys and wide tables fit the page", async () => {
  const page = await admin.newPage();
  await page.setViewportSize({ width: 1280, height: 800 });
  await open(page, url("/waits", { ns: "alpha", turn: "open-1" }));
  const link = page.locator('table#waits tr[data-wait="open-1/approval"] a.turn-link');
  assert.equal(new URL(await link.getAttribute("href"), fixture.base).searchParams.get("id"), "open-1");
  const wide = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(wide <= 1280, `the waits page is ${wide} px wide in a 1280 px viewport`);
  const key = `open-1/${"charge-".repeat(6)}card`;
  await client.begin(key, { leaseMs: 3600_000 });
  await open(page, url("/keys", { ns: "alpha", prefix: key }));
  const code = page.locator(`table#keys tr[data-key="${key}"] code.key`);
  assert.equal(await code.evaluate((c) => c.getClientRects().length), 1, "a key is never broken across lines");
  assert.equal(new URL(await page.locator(`table#keys tr[data-key="${key}"] a.turn-link`).getAttribute("href"), fixture.base).searchParams.get("id"), "open-1");
  assert.ok((await page.evaluate(() => document.documentElement.scrollWidth)) <= 1280);
  await page.close();
});

test("a signal's confirmation shows its payload", async () => {
  const page = await admin.newPage();
  await open(page, url("/waits", { ns: "alpha", status: "pending", turn: "open-1" }));
  const form = page.locator('table#waits tr[data-wait="open-1/approval"] form[action="/actions/signal-wait"]');
  await form.locator('[name="payload"]').fill('{"approved":"by ops"}');
  await Promise.all([page.waitForResponse((r) => new URL(r.url()).pathname === "/actions/signal-wait"), form.getByRole("button", { name: "Signal" }).click()]);
  assert.match(await page.locator("#question").innerText(), /with the payload "\{\\"approved\\":\\"by ops\\"\}"/);
  await page.close();
});
