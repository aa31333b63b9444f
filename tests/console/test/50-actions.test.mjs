// The admin actions: releasing a key (retryable and permanent), signalling
// and cancelling a wait, and deleting a turn, each through its confirmation
// page, then checked through the gRPC client as well as on the page, and in
// the audit events of the sidecar's log. The reader sees no action buttons
// and a POST built by hand is refused; a POST without its CSRF token, or
// with a wrong one, is refused and changes nothing. Refusals are audited.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { RecordState, StepwellClient, WaitStatus } from "../../../clients/typescript/dist/src/index.js";
import { assertAudited, csrfOf, fixture, launch, open, personContext, rowKeys, url } from "../lib/browser.mjs";

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

/** The form of `action` inside `scope` whose button is named `button`. */
function actionForm(scope, action, button) {
  return scope.locator(`form[action="/actions/${action}"]`).filter({ has: scope.page().getByRole("button", { name: button, exact: true }) });
}

/**
 * Submits `form` with `fields` typed in, checks the confirmation page (its
 * form repeats the fields with confirmed=1) and that nothing changed yet
 * (`unchanged`), confirms, and returns the page it lands on.
 */
async function act(page, form, action, fields, unchanged) {
  assert.equal(await form.count(), 1, `one ${action} form`);
  for (const [name, value] of Object.entries(fields)) await form.locator(`[name="${name}"]`).fill(value);
  const [confirmation] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && new URL(r.url()).pathname === `/actions/${action}`),
    form.locator('button, [type="submit"]').first().click(),
  ]);
  assert.equal(confirmation.status(), 200, `${action}: the first POST shows a confirmation page`);
  const confirm = page.locator(`form[action="/actions/${action}"]`).filter({ has: page.locator('input[name="confirmed"][value="1"]') });
  await confirm.waitFor();
  await unchanged();
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith("/actions/")), confirm.getByRole("button", { name: "Confirm" }).click()]);
  assert.ok(new URL(page.url()).searchParams.get("notice"), `${action}: lands with a notice`);
  await page.locator("#notice[role=status]").waitFor();
  return page;
}

test("the admin releases a key, retryable, through its confirmation", async () => {
  const page = await admin.newPage();
  await open(page, url("/keys", { ns: "alpha", state: "in_progress", prefix: "act-retry" }));
  const row = page.locator('table#keys tr[data-key="act-retry"]');
  const form = actionForm(row, "release-key", "Release");
  await act(page, form, "release-key", {}, async () => assert.equal((await client.get("act-retry")).state, RecordState.IN_PROGRESS));
  assert.equal(new URL(page.url()).pathname, "/keys");
  assert.equal((await client.get("act-retry")).state, RecordState.RELEASED);
  await assertAudited({ principal: "admin", action: "release-key", namespace: "alpha", subject: "act-retry", outcome: "ok" });
  await open(page, url("/keys", { ns: "alpha", state: "released" }));
  assert.deepEqual(await rowKeys(page, "keys", "key"), ["act-retry"]);
  await page.close();
});

test("the admin releases a key permanently, with an error", async () => {
  const page = await admin.newPage();
  await open(page, url("/keys", { ns: "alpha", state: "in_progress", prefix: "act-perm" }));
  const row = page.locator('table#keys tr[data-key="act-perm"]');
  const form = actionForm(row, "release-key", "Fail permanently");
  await act(page, form, "release-key", { error: "stuck: released by hand" }, async () =>
    assert.equal((await client.get("act-perm")).state, RecordState.IN_PROGRESS),
  );
  const got = await client.get("act-perm");
  assert.equal(got.state, RecordState.FAILED);
  assert.equal(got.error, "stuck: released by hand");
  await assertAudited({ principal: "admin", action: "fail-key", namespace: "alpha", subject: "act-perm", outcome: "ok" });
  await open(page, url("/keys", { ns: "alpha", state: "failed", prefix: "act-perm" }));
  assert.match(await page.locator('table#keys tr[data-key="act-perm"]').innerText(), /stuck: released by hand/);
  await page.close();
});

test("the admin signals a wait, and cancels another", async () => {
  const page = await admin.newPage();
  const pending = async (name) => assert.equal((await client.getWait({ turnId: "act-wait", name })).wait.status, WaitStatus.PENDING);
  await open(page, url("/waits", { ns: "alpha", status: "pending", turn: "act-wait" }));
  const signalForm = actionForm(page.locator('table#waits tr[data-wait="act-wait/to-signal"]'), "signal-wait", "Signal");
  await act(page, signalForm, "signal-wait", { payload: '{"approved":true}' }, () => pending("to-signal"));
  const signalled = (await client.getWait({ turnId: "act-wait", name: "to-signal" })).wait;
  assert.equal(signalled.status, WaitStatus.RESOLVED);
  assert.equal(signalled.contentType, "application/json");
  assert.deepEqual(JSON.parse(new TextDecoder().decode(signalled.payload)), { approved: true });
  // The console signals on behalf of the person signed in, and says so.
  assert.equal(signalled.settledBy, "console:admin");
  await assertAudited({ principal: "admin", action: "signal-wait", namespace: "alpha", subject: (s) => s.includes("to-signal"), outcome: "ok" });

  await open(page, url("/waits", { ns: "alpha", status: "pending", turn: "act-wait" }));
  const cancelForm = actionForm(page.locator('table#waits tr[data-wait="act-wait/to-cancel"]'), "cancel-wait", "Cancel");
  await act(page, cancelForm, "cancel-wait", {}, () => pending("to-cancel"));
  assert.equal((await client.getWait({ turnId: "act-wait", name: "to-cancel" })).wait.status, WaitStatus.CANCELLED);
  await assertAudited({ principal: "admin", action: "cancel-wait", namespace: "alpha", subject: (s) => s.includes("to-cancel"), outcome: "ok" });
  await page.close();
});

test("the admin deletes a turn", async () => {
  const page = await admin.newPage();
  await open(page, url("/turn", { ns: "alpha", id: "delete-me" }));
  const form = actionForm(page.locator("main"), "delete-turn", "Delete this turn");
  await act(page, form, "delete-turn", {}, async () => assert.equal((await client.restore("delete-me")).length, 1));
  assert.equal(new URL(page.url()).pathname, "/turns");
  assert.deepEqual(await client.restore("delete-me"), []);
  await assertAudited({ principal: "admin", action: "delete-turn", namespace: "alpha", subject: "delete-me", outcome: "ok" });
  await open(page, url("/turns", { ns: "alpha", status: "all", prefix: "delete-me" }));
  assert.equal(await page.locator('table#turns tr[data-turn="delete-me"]').count(), 0);
  await page.close();
});

/** Everything the reader's and the CSRF tests try to change, as it was seeded. */
async function assertUntouched() {
  assert.equal((await client.get("reader-held")).state, RecordState.IN_PROGRESS);
  assert.equal((await client.restore("reader-keep")).length, 1);
  assert.equal((await client.restore("csrf-keep")).length, 1);
  assert.equal((await client.getWait({ turnId: "act-wait", name: "reader-keep" })).wait.status, WaitStatus.PENDING);
}

/** Each refused action, its form, and the subject its audit event names. */
const attempts = [
  ["release-key", { ns: "alpha", key: "reader-held", permanent: "on", error: "x" }, "reader-held"],
  ["delete-turn", { ns: "alpha", id: "reader-keep" }, "reader-keep"],
  ["delete-turn", { ns: "alpha", id: "csrf-keep" }, "csrf-keep"],
  ["signal-wait", { ns: "alpha", turn: "act-wait", name: "reader-keep", payload: "x" }, "act-wait/reader-keep"],
  ["cancel-wait", { ns: "alpha", turn: "act-wait", name: "reader-keep" }, "act-wait/reader-keep"],
];

test("the reader sees no action buttons, and a POST built by hand is refused", async () => {
  const page = await reader.newPage();
  for (const path of ["/keys?ns=alpha&state=all", "/waits?ns=alpha&status=all", "/turn?ns=alpha&id=reader-keep", "/turns?ns=alpha"]) {
    await open(page, path);
    assert.equal(await page.locator('form[action^="/actions/"]').count(), 0, `${path} offers the reader an action`);
  }
  const csrf = await csrfOf(page);
  assert.ok(csrf);
  for (const [action, form, subject] of attempts) {
    const response = await page.request.post(`/actions/${action}`, { form: { ...form, csrf, confirmed: "1" }, maxRedirects: 0 });
    assert.equal(response.status(), 403, `reader POST /actions/${action}`);
    await assertAudited({ principal: "reader", action, namespace: "alpha", subject, outcome: "PERMISSION_DENIED" });
  }
  await assertUntouched();
  await page.close();
});

test("an admin POST without its CSRF token, or with a wrong one, is refused and changes nothing", async () => {
  const page = await admin.newPage();
  await open(page, "/keys?ns=alpha");
  const csrf = await csrfOf(page);
  for (const [action, form, subject] of attempts) {
    for (const token of [undefined, "", `${csrf}x`]) {
      const body = token === undefined ? { ...form, confirmed: "1" } : { ...form, csrf: token, confirmed: "1" };
      const response = await page.request.post(`/actions/${action}`, { form: body, maxRedirects: 0 });
      assert.equal(response.status(), 403, `POST /actions/${action} with csrf ${JSON.stringify(token)}`);
      assert.match(await response.text(), /CSRF/);
    }
    await assertAudited({ principal: "admin", action, subject, outcome: "CSRF_TOKEN_WRONG" });
  }
  // A plain fetch with the session cookie and no token: refused too.
  const cookie = (await admin.cookies()).find((c) => c.name === "stepwell_console");
  const plain = await fetch(`${fixture.base}/actions/delete-turn`, {
    method: "POST",
    headers: { cookie: `${cookie.name}=${cookie.value}`, "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ ns: "alpha", id: "csrf-keep", confirmed: "1" }),
    redirect: "manual",
  });
  assert.equal(plain.status, 403);
  await assertUntouched();
  await page.close();
});

test("a form posted from another site is refused before its action, and audited", async () => {
  const page = await admin.newPage();
  await open(page, "/keys?ns=alpha");
  const csrf = await csrfOf(page);
  const response = await page.request.post("/actions/delete-turn", {
    form: { ns: "alpha", id: "csrf-keep", csrf, confirmed: "1" },
    headers: { origin: "https://elsewhere.example", "sec-fetch-site": "cross-site" },
    maxRedirects: 0,
  });
  assert.equal(response.status(), 403);
  assert.match(await response.text(), /another site/);
  await assertAudited({ principal: "admin", action: "delete-turn", outcome: "CROSS_ORIGIN" });
  await assertUntouched();
  await page.close();
});
