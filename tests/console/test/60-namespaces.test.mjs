// A reader, granted only namespace alpha, who types beta's URLs gets a 403
// page and none of beta's data; the overview and the namespace picker list
// only alpha for them.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { launch, open, personContext, url } from "../lib/browser.mjs";

const BETA_DATA = ["beta-secret-turn", "beta-done", "beta-secret-key", "beta-failed-key", "beta-done-key", "beta-secret-wait", "beta error", "beta result"];

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

test("the reader opening beta's URLs gets 403 and none of beta's data", async () => {
  const paths = [
    url("/", { ns: "beta" }),
    url("/turns", { ns: "beta" }),
    url("/turns", { ns: "beta", status: "all", prefix: "beta-" }),
    url("/turn", { ns: "beta", id: "beta-secret-turn" }),
    url("/keys", { ns: "beta" }),
    url("/keys", { ns: "beta", state: "all" }),
    url("/waits", { ns: "beta", status: "all" }),
    url("/turn/state", { ns: "beta", id: "beta-secret-turn", seq: "1" }),
  ];
  for (const path of paths) {
    const response = await page.goto(path);
    assert.equal(response.status(), 403, path);
    const html = await response.text();
    for (const secret of BETA_DATA) assert.ok(!html.includes(secret), `${path} shows ${secret}`);
    if (!path.startsWith("/turn/state")) await page.getByRole("alert").waitFor();
  }
});

test("the reader's overview and namespace picker list only alpha", async () => {
  await open(page, "/");
  assert.equal(await page.locator('section.namespace[data-ns="alpha"]').count(), 1);
  assert.equal(await page.locator('section.namespace[data-ns="beta"]').count(), 0);
  const html = await page.content();
  assert.ok(!/\bbeta\b/.test(html), "the reader's overview names beta");
  for (const secret of BETA_DATA) assert.ok(!html.includes(secret), `the overview shows ${secret}`);
});

test("the admin, granted beta, opens the same URLs", async () => {
  const admin = await personContext(browser, "admin");
  const adminPage = await admin.newPage();
  await open(adminPage, url("/turn", { ns: "beta", id: "beta-secret-turn" }));
  assert.match(await adminPage.locator("h1").innerText(), /beta-secret-turn/);
  await open(adminPage, url("/keys", { ns: "beta", state: "all" }));
  assert.ok((await adminPage.locator("table#keys").innerText()).includes("beta-secret-key"));
  await admin.close();
});
