// The turn page as a timeline: the turn whose clients' clocks ran 2 h ahead
// and 3 s behind the store shows that skew on exactly those rows, a
// checkpoint's state opens in the JSON viewer and downloads whole, and a
// LangGraph-style thread's records are drawn as their checkpoint tree.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { launch, open, personContext, rowKeys, url } from "../lib/browser.mjs";

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
async function cells(phase) {
  return page.locator(`table#checkpoints tr[data-phase="${phase}"]`).evaluate((tr) => {
    const headers = [...tr.closest("table").querySelectorAll("thead th")].map((th) => th.textContent.trim().toLowerCase());
    const out = { className: tr.className };
    [...tr.cells].forEach((td, i) => (out[headers[i] ?? i] = td.textContent.trim()));
    return out;
  });
}

test("the skewed turn shows the skew of the rows whose clocks were off, and only those", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "skew-1" }));
  assert.deepEqual([...(await rowKeys(page, "checkpoints", "phase"))].sort(), ["ahead", "behind", "on-time"]);
  const ahead = await cells("ahead");
  const behind = await cells("behind");
  const onTime = await cells("on-time");
  assert.match(ahead.className, /\bskewed\b/);
  assert.match(behind.className, /\bskewed\b/);
  assert.doesNotMatch(onTime.className, /\bskewed\b/);
  // 2 h ahead of the commit: "+2 h 0 m" (a minute's rounding either way).
  assert.match(ahead.skew, /^\+\s?(2 h|1 h 59 m)/);
  // 3 s behind: "−3.0 s" or a little more, as the commit came after the stamp.
  assert.match(behind.skew, /^[−-]\s?3\.\d s$/);
  assert.doesNotMatch(onTime.skew, /h|[−-][1-9]/);
  assert.equal(await page.locator("section#timeline svg.timeline").count(), 1);
});

test("a checkpoint's state opens in the viewer, and downloads whole as JSON", async () => {
  await open(page, url("/turn", { ns: "alpha", id: "open-1" }));
  const row = page.locator('table#checkpoints tr[data-phase="act"]');
  const viewer = page.locator("details.state").filter({ hasText: "phase" }).first();
  await viewer.locator("summary").first().click();
  assert.equal(await viewer.evaluate((d) => d.open), true);
  assert.match(await viewer.innerText(), /act/);
  const link = page.getByRole("link", { name: /Download the whole state/ }).first();
  const href = await link.getAttribute("href");
  assert.match(href, /^\/turn\/state\?/);
  const response = await page.request.get(href);
  assert.equal(response.status(), 200);
  assert.match(response.headers()["content-type"], /^application\/json/);
  assert.match(response.headers()["content-disposition"], /^attachment/);
  const state = await response.json();
  assert.equal(typeof state.step, "number");
  assert.ok(["plan", "act"].includes(state.phase));
  assert.equal(await row.count(), 1);
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
