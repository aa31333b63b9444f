// Accessibility and screenshots: axe-core checks every page of the console
// (sign-in, overview, turns, a turn, keys, waits, a confirmation and a 403
// page) and must find no violation of impact serious or critical; each page
// is saved as a full-page screenshot, named by page and backend, into the
// artifacts folder.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { launch, newContext, open, personContext, screenshot, seriousViolations, url } from "../lib/browser.mjs";

let browser;
let admin;
let reader;
before(async () => {
  browser = await launch();
  admin = await personContext(browser, "admin");
  reader = await personContext(browser, "reader");
});
after(async () => {
  assert.deepEqual([...(admin?.dialogs ?? []), ...(reader?.dialogs ?? [])], []);
  await browser?.close();
});

const pages = {
  overview: "/",
  turns: url("/turns", { ns: "alpha", status: "all" }),
  turn: url("/turn", { ns: "alpha", id: "skew-1" }),
  "turn-thread": url("/turn", { ns: "alpha", id: "lg-thread" }),
  keys: url("/keys", { ns: "alpha", state: "all" }),
  waits: url("/waits", { ns: "alpha", status: "all" }),
};

for (const [name, path] of Object.entries(pages)) {
  test(`${name}: no serious or critical axe violation`, async () => {
    const page = await admin.newPage();
    await open(page, path);
    await screenshot(page, name);
    assert.deepEqual(await seriousViolations(page), []);
    await page.close();
  });
}

test("sign-in page, with and without an error: no serious or critical axe violation", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  await open(page, "/signin");
  await screenshot(page, "signin");
  assert.deepEqual(await seriousViolations(page), []);
  await page.locator("#token").fill("swt_wrong");
  await Promise.all([page.waitForLoadState(), page.getByRole("button", { name: "Sign in" }).click()]);
  await page.getByRole("alert").waitFor();
  await screenshot(page, "signin-refused");
  assert.deepEqual(await seriousViolations(page), []);
  await context.close();
});

test("a confirmation page: no serious or critical axe violation", async () => {
  const page = await admin.newPage();
  await open(page, url("/keys", { ns: "alpha", state: "in_progress", prefix: "open-1/charge" }));
  const form = page.locator('table#keys tr[data-key="open-1/charge"] form[action="/actions/release-key"]').first();
  await Promise.all([page.waitForURL((u) => u.pathname === "/actions/release-key"), form.locator('button, [type="submit"]').first().click()]);
  await page.locator('input[name="confirmed"][value="1"]').waitFor({ state: "attached" });
  await screenshot(page, "confirm-release");
  assert.deepEqual(await seriousViolations(page), []);
  assert.ok(await page.locator('input[name="csrf"]').inputValue());
  await page.close();
});

test("a 403 page: no serious or critical axe violation", async () => {
  const page = await reader.newPage();
  await open(page, url("/turns", { ns: "beta" }), 403);
  await screenshot(page, "forbidden");
  assert.deepEqual(await seriousViolations(page), []);
  await page.close();
});
