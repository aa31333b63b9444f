// Every page and every filter of the console, as the admin sees them: the
// overview's counts and their links, the turns list by status, session,
// time range and id prefix with cursor paging, the turn page's sections,
// the keys by state and the waits by status and turn. Each filter is
// checked by what it lets through and what it keeps out, so a filter that
// is ignored fails.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { StepwellClient } from "../../../clients/typescript/dist/src/index.js";
import { cells, fixture, launch, open, personContext, rowKeys, until, url } from "../lib/browser.mjs";
import { XSS_TURN } from "../lib/payloads.mjs";

let browser;
let context;
let page;
before(async () => {
  browser = await launch();
  context = await personContext(browser, "admin");
  page = await context.newPage();
});
after(async () => {
  assert.deepEqual(context?.dialogs ?? [], []);
  await browser?.close();
});

/** The overview's counts of one namespace, by their terms. */
async function counts(ns) {
  const section = page.locator(`section.namespace[data-ns="${ns}"]`);
  return section.locator("dl").first().evaluate((dl) => {
    const out = {};
    for (const dt of dl.querySelectorAll("dt")) out[dt.textContent.trim()] = dt.nextElementSibling;
    return Object.fromEntries(
      Object.entries(out).map(([k, dd]) => [k, { n: Number(dd.textContent.trim()), href: dd.querySelector("a")?.getAttribute("href") }]),
    );
  });
}

test("the overview shows each granted namespace's counts, charts and store health", async () => {
  await open(page, "/");
  assert.equal(await page.locator('section.namespace[data-ns="alpha"]').count(), 1);
  assert.equal(await page.locator('section.namespace[data-ns="beta"]').count(), 1);
  const beta = await counts("beta");
  assert.equal(beta["Terminal or at rest"].n, 1);
  assert.equal(beta["Keys in progress"].n, 1);
  assert.equal(beta["Expired leases"].n, 1);
  assert.equal(beta["Failed keys"].n, 1);
  assert.equal(beta["Pending timers"].n, 1);
  assert.ok(beta["Open turns"].n >= 1);
  assert.ok(beta["Pending waits"].n >= 1);
  for (const term of ["Open turns", "Stalled turns", "Terminal or at rest", "Keys in progress", "Expired leases", "Failed keys", "Pending waits", "Pending timers"]) {
    assert.ok(beta[term]?.href, `${term} links to its list`);
  }
  assert.match(await page.locator('svg.chart.writes[role="img"]').getAttribute("aria-label"), /^Writes per minute/);
  assert.match(await page.locator('svg.chart.errors[role="img"]').getAttribute("aria-label"), /per minute/);
  assert.equal((await page.locator("#store-health").innerText()).trim(), "store up");
  assert.match(await page.locator("#queue-depth").innerText(), /\d/);
  await open(page, "/?ns=beta");
  assert.equal(await page.locator('section.namespace[data-ns="alpha"]').count(), 0);
  assert.equal(await page.locator('section.namespace[data-ns="beta"]').count(), 1);
});

test("an overview count links to the list it counts", async () => {
  await open(page, "/?ns=beta");
  const beta = await counts("beta");
  await open(page, beta["Failed keys"].href);
  assert.deepEqual(await rowKeys(page, "keys", "key"), ["beta-failed-key"]);
  await open(page, beta["Terminal or at rest"].href);
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["beta-done"]);
  await open(page, beta["Pending timers"].href);
  assert.deepEqual(await rowKeys(page, "waits", "wait"), ["beta-secret-turn/beta-timer"]);
});

test("turns: status, session and prefix filters, sorted by last activity", async () => {
  await open(page, url("/turns", { ns: "alpha", status: "open", prefix: "terminal-" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), []);
  await open(page, url("/turns", { ns: "alpha", status: "terminal" }));
  const terminal = await rowKeys(page, "turns", "turn");
  assert.ok(terminal.includes("terminal-1") && !terminal.includes("open-1"), terminal.join(","));
  await open(page, url("/turns", { ns: "alpha", status: "all", session: "s-filter" }));
  // terminal-1 was written after open-1, so it comes first.
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["terminal-1", "open-1"]);
  await open(page, url("/turns", { ns: "alpha", status: "open", session: "s-filter" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["open-1"]);
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "skew-" }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["skew-1"]);
  const row = page.locator('table#turns tr[data-turn="skew-1"]');
  const skew = await cells(row);
  assert.equal(skew.holds, "3 checkpoints");
  assert.equal(skew.kind, "checkpoint log");
  assert.equal(skew.status, "open");
  await row.getByRole("link").first().click();
  await page.waitForURL((u) => u.pathname === "/turn");
  assert.equal(new URL(page.url()).searchParams.get("id"), "skew-1");
});

test("turns: the filter form carries the filters in the query string", async () => {
  await open(page, url("/turns", { ns: "alpha" }));
  const form = page.locator("form#filters");
  await form.locator('[name="prefix"]').fill("terminal-");
  await form.locator('[name="status"]').selectOption("all");
  await Promise.all([page.waitForURL((u) => u.searchParams.get("prefix") === "terminal-"), form.locator('[type="submit"], button').first().click()]);
  assert.equal(new URL(page.url()).searchParams.get("status"), "all");
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["terminal-1"]);
});

/** `YYYY-MM-DDTHH:MM` in UTC, the form's time format. */
const minute = (ms) => new Date(ms).toISOString().slice(0, 16);

test("turns: the time range keeps turns whose last activity is inside it", async () => {
  const from = Date.parse(fixture.seededFrom) - 60_000;
  const to = Date.now() + 120_000;
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "open-", from: minute(from), to: minute(to) }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), ["open-1"]);
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "open-", from: new Date(to).toISOString() }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), []);
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "open-", to: minute(from) }));
  assert.deepEqual(await rowKeys(page, "turns", "turn"), []);
});

test("turns: rel=next pages through every turn once", async () => {
  let next = url("/turns", { ns: "alpha", status: "all", prefix: "bulk-" });
  const seen = [];
  let pages = 0;
  while (next) {
    await open(page, next);
    pages += 1;
    seen.push(...(await rowKeys(page, "turns", "turn")));
    const link = page.locator('a[rel="next"]');
    next = (await link.count()) ? await link.getAttribute("href") : undefined;
    assert.ok(pages <= fixture.bulkTurns, "paging does not end");
  }
  assert.ok(pages >= 2, `one page held all ${seen.length} turns: no paging tested`);
  assert.equal(seen.length, fixture.bulkTurns);
  assert.equal(new Set(seen).size, fixture.bulkTurns);
  // Newest activity first: the bulk turns were written in name order.
  assert.deepEqual(seen, [...seen].sort().reverse());
});

test("the turn page shows the timeline, checkpoints, state viewer, records, keys and waits", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "open-1" }));
  assert.equal(await page.locator("section#timeline svg.timeline").count(), 1);
  const phases = await rowKeys(page, "checkpoints", "phase");
  assert.deepEqual([...phases].sort(), ["act", "plan"]);
  // The newest checkpoint's state is shown at first.
  assert.equal(await page.locator("details.state").count(), 1);
  assert.match(await page.locator("details.state").innerText(), /act/);
  const keys = await page.locator("section#keys").innerText();
  assert.ok(keys.includes("open-1/charge") && keys.includes("open-1/expired"), keys);
  assert.ok(!keys.includes("terminal-1/"), keys);
  const waits = await page.locator("section#waits").innerText();
  assert.ok(waits.includes("approval") && waits.includes("deadline") && waits.includes("timer"), waits);
  assert.equal(await page.locator("section#records").count(), 1);
});

test("keys: each state filter lists its keys and only them", async () => {
  const expect = {
    in_progress: ["open-1/charge", "reader-held"],
    expired: ["open-1/expired"],
    failed: ["terminal-1/failed", `${XSS_TURN}/"><img src=x onerror=alert(1)>`],
    completed: ["terminal-1/done"],
  };
  for (const [state, keys] of Object.entries(expect)) {
    await open(page, url("/keys", { ns: "alpha", state }));
    const shown = await rowKeys(page, "keys", "key");
    for (const key of keys) assert.ok(shown.includes(key), `${state}: ${key} missing from ${shown.join(",")}`);
    for (const [other, otherKeys] of Object.entries(expect)) {
      if (other !== state) for (const key of otherKeys) assert.ok(!shown.includes(key), `${state} lists ${other} key ${key}`);
    }
  }
  await open(page, url("/keys", { ns: "alpha", state: "all", prefix: "terminal-1/" }));
  assert.deepEqual((await rowKeys(page, "keys", "key")).sort(), ["terminal-1/done", "terminal-1/failed"]);
});

test("keys: a held lease shows its fencing token, attempts and a countdown", async () => {
  await open(page, url("/keys", { ns: "alpha", state: "in_progress", prefix: "open-1/charge" }));
  const row = page.locator('table#keys tr[data-key="open-1/charge"]');
  const countdown = row.locator("time.countdown");
  assert.equal(await countdown.count(), 1);
  const when = Date.parse(await countdown.getAttribute("datetime"));
  assert.ok(when > Date.now(), "the lease ends in the future");
  // The script ticks it down from the server's text ("expires in …") to "in 59 m 58 s".
  await until(async () => /^in \d+ m \d+ s$/.test(await countdown.innerText()), "the countdown to tick");
  const shown = await cells(row);
  const client = new StepwellClient({ target: fixture.target, namespace: "alpha", token: fixture.tokens.admin });
  try {
    assert.equal(shown["fencing token"], String((await client.get("open-1/charge")).leaseToken));
  } finally {
    client.close();
  }
  assert.equal(shown.attempts, "1");
  assert.equal(shown.state, "in progress");
  await open(page, url("/keys", { ns: "alpha", state: "failed", prefix: "terminal-1/" }));
  assert.match(await page.locator('table#keys tr[data-key="terminal-1/failed"]').innerText(), /card declined/);
  await open(page, url("/keys", { ns: "alpha", state: "completed", prefix: "terminal-1/" }));
  assert.match(await page.locator('table#keys tr[data-key="terminal-1/done"]').innerText(), /"ok":\s*true/);
});

test("waits: pending, timers, settled and the turn filter", async () => {
  await open(page, url("/waits", { ns: "alpha", status: "pending", turn: "open-1" }));
  const pending = await rowKeys(page, "waits", "wait");
  assert.ok(pending.includes("open-1/approval") && pending.includes("open-1/deadline"), pending.join(","));
  assert.ok(pending.every((w) => w.startsWith("open-1/")), pending.join(","));
  assert.equal(await page.locator('table#waits tr[data-wait="open-1/deadline"] time.countdown').count(), 1);
  await open(page, url("/waits", { ns: "alpha", status: "timers" }));
  const timers = await rowKeys(page, "waits", "wait");
  assert.ok(timers.includes("open-1/timer") && !timers.includes("open-1/approval"), timers.join(","));
  await open(page, url("/waits", { ns: "alpha", status: "settled", turn: "terminal-1" }));
  assert.deepEqual(await rowKeys(page, "waits", "wait"), ["terminal-1/settled"]);
  const settled = await page.locator('table#waits tr[data-wait="terminal-1/settled"]').innerText();
  assert.ok(settled.includes("<script>alert(1)</script>"), `settled by the writer: ${settled}`);
  await open(page, url("/waits", { ns: "alpha", status: "all", turn: "terminal-1" }));
  assert.deepEqual(await rowKeys(page, "waits", "wait"), ["terminal-1/settled"]);
});

test("every page has the console's navigation and a namespace picker", async () => {
  for (const path of ["/?ns=alpha", "/turns?ns=alpha", "/turn?ns=alpha&id=open-1", "/keys?ns=alpha", "/waits?ns=alpha"]) {
    await open(page, path);
    const nav = page.getByRole("navigation", { name: "Console" });
    for (const name of ["Overview", "Turns", "Keys", "Waits"]) {
      assert.equal(await nav.getByRole("link", { name, exact: true }).count(), 1, `${path}: ${name}`);
    }
    assert.equal(await page.locator("main#main").count(), 1, path);
  }
});
