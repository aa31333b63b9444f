// The turn page as a timeline: the turn whose clients' clocks ran 2 h ahead
// and 3 s behind the store shows that skew on exactly those rows, a
// checkpoint's state opens in the JSON viewer and downloads whole, and a
// LangGraph-style thread's records are drawn as their checkpoint tree.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { cells, launch, open, personContext, rowKeys, url } from "../lib/browser.mjs";

let browser;
let context;
let page;
before(async () => {
  browser = await launch();
  context = await personContext(browser, "reader");
  page = await context.newPage();
});
after(async () => {
  assert.deepEqual(context?.dialogs ?? [], []);
  await browser?.close();
});

/** A checkpoint row's cells by their column headers. */
const checkpoint = (phase) => cells(page.locator(`table#checkpoints tr[data-phase="${phase}"]`));

test("the skewed turn shows the skew of the rows whose clocks were off, and only those", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "skew-1" }));
  assert.deepEqual([...(await rowKeys(page, "checkpoints", "phase"))].sort(), ["ahead", "behind", "on-time"]);
  const ahead = await checkpoint("ahead");
  const behind = await checkpoint("behind");
  const onTime = await checkpoint("on-time");
  assert.match(ahead.className, /\bskewed\b/);
  assert.match(behind.className, /\bskewed\b/);
  assert.doesNotMatch(onTime.className, /\bskewed\b/);
  // The skew is the commit time less the client's: a clock 2 h ahead reads
  // "−1 h 59 m" (the commit came a moment after the stamp) or "−2 h 0 m".
  assert.match(ahead.skew, /^[−-](2 h 0 m|1 h 59 m) clock skew$/);
  // A clock 3 s behind: "+3.0 s", or a little more.
  assert.match(behind.skew, /^\+3\.\d s clock skew$/);
  assert.match(onTime.skew, /^\+\d+ ms$/);
  assert.equal(await page.locator("section#timeline svg.timeline").count(), 1);
});

test("a checkpoint's state shows in the collapsible viewer, and downloads whole as JSON", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "open-1" }));
  // The newest checkpoint's state at first; its row's link shows the older one's.
  const viewer = page.locator("details.state");
  assert.match(await viewer.innerText(), /phase: "act"/);
  await page.locator('table#checkpoints tr[data-phase="plan"]').getByRole("link").click();
  await page.waitForURL((u) => u.searchParams.has("at"));
  assert.match(await viewer.innerText(), /phase: "plan"/);
  // Collapsible: the state is a <details>, and so is each object within it.
  assert.ok((await viewer.locator("details.json > summary").count()) >= 1);
  const link = page.getByRole("link", { name: /Download the whole state/ });
  const href = await link.getAttribute("href");
  assert.match(href, /^\/turn\/state\?/);
  const response = await page.request.get(href);
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-type"], /^application\/json/);
  assert.match(response.headers()["content-disposition"], /^attachment/);
  assert.deepEqual(await response.json(), { step: 0, phase: "plan" });
});

test("a LangGraph thread's records are drawn as their checkpoint tree", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "lg-thread" }));
  const tree = page.locator("section#records ul.tree");
  assert.ok((await tree.count()) >= 1, "no ul.tree in #records");
  // c2 and the fork hang under c1, and c3 under c2.
  const shape = await tree.first().evaluate((ul) => {
    const parentOf = {};
    for (const li of ul.querySelectorAll("li")) {
      const own = [...li.childNodes].filter((n) => n.nodeName !== "UL").map((n) => n.textContent).join(" ");
      const id = ["c2-fork", "c1", "c2", "c3"].find((c) => new RegExp(`(^|[^\\w-])${c}([^\\w-]|$)`).test(own));
      const parentLi = li.parentElement.closest("li");
      const parentOwn = parentLi ? [...parentLi.childNodes].filter((n) => n.nodeName !== "UL").map((n) => n.textContent).join(" ") : "";
      parentOf[id] = ["c2-fork", "c1", "c2", "c3"].find((c) => new RegExp(`(^|[^\\w-])${c}([^\\w-]|$)`).test(parentOwn)) ?? null;
    }
    return parentOf;
  });
  assert.deepEqual(shape, { c1: null, c2: "c1", c3: "c2", "c2-fork": "c1" });
});
