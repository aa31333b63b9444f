// The injection payloads seeded into turn ids, session ids, workflow
// versions, states, key names, errors, results, wait names, metadata and
// the settling principal's id, and typed into filters and action forms,
// render as inert text on every page: no dialog fires, no element or
// script of theirs exists in the document, and the text appears literally.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { csrfOf, launch, personContext, url } from "../lib/browser.mjs";
import { IMG, QUOTES, SCRIPT, XSS_PRINCIPAL, XSS_TURN, XSS_TURN_2 } from "../lib/payloads.mjs";

let browser;
let context;
let page;
before(async () => {
  browser = await launch();
  context = await personContext(browser, "admin");
  page = await context.newPage();
});
after(async () => {
  await browser?.close();
});

/** What the payloads would have made, had they been parsed as markup. */
async function injected() {
  return page.evaluate(() => {
    const found = [];
    for (const el of document.querySelectorAll("*")) {
      const handler = [...el.attributes].some((a) => a.name.startsWith("on"));
      const bold = el.localName === "b" && el.textContent === "bold";
      if (handler || bold || el.getAttribute("src") === "x") found.push(el.outerHTML);
    }
    for (const s of document.scripts) {
      if (!s.src || new URL(s.src).pathname !== "/assets/console.js" || s.textContent.trim()) found.push(s.outerHTML);
    }
    return found;
  });
}

/** Loads `path` (or takes the page as it is) and checks the payloads stayed text. */
async function assertInert(path, literals, status = 200) {
  if (path) {
    const response = await page.goto(path);
    assert.equal(response.status(), status, path);
  }
  // Every collapsed viewer opened, so a payload inside one is rendered too.
  await page.evaluate(() => document.querySelectorAll("details").forEach((d) => (d.open = true)));
  assert.deepEqual(await injected(), [], `${path}: injected elements`);
  const text = await page.evaluate(() => document.body.textContent);
  for (const literal of literals) assert.ok(text.includes(literal), `${path}: ${JSON.stringify(literal)} not shown as text`);
  assert.deepEqual(context.dialogs, [], `${path}: a dialog fired`);
}

test("the turns list and the turn pages show payload ids, sessions, versions and states as text", async () => {
  await assertInert(url("/turns", { ns: "alpha", status: "all", prefix: "xss-" }), [XSS_TURN, XSS_TURN_2, IMG]);
  for (const id of [XSS_TURN, XSS_TURN_2]) {
    // The session, the workflow version, and the state's keys and strings in the viewer.
    await assertInert(url("/turn", { ns: "alpha", id }), [id, IMG, `${SCRIPT}${QUOTES}`, SCRIPT, QUOTES]);
  }
  // Its keys (names, an error, a result) and waits (names, a payload, the settling principal).
  await assertInert(url("/turn", { ns: "alpha", id: XSS_TURN }), [`${XSS_TURN}/${IMG}`, `${SCRIPT}${IMG}${QUOTES}`, `${XSS_TURN}/${QUOTES}`, XSS_PRINCIPAL]);
});

test("keys and waits show payload names, errors, results, metadata and principals as text", async () => {
  await assertInert(url("/keys", { ns: "alpha", state: "all", prefix: "xss-" }), [`${XSS_TURN}/${IMG}`, `${XSS_TURN}/${QUOTES}`, `${SCRIPT}${IMG}${QUOTES}`, SCRIPT]);
  await assertInert(url("/waits", { ns: "alpha", status: "all", turn: XSS_TURN }), [XSS_TURN, IMG, SCRIPT, XSS_PRINCIPAL]);
  await assertInert(url("/waits", { ns: "alpha", status: "settled", turn: "terminal-1" }), [XSS_PRINCIPAL]);
  // A record's metadata is shown as its JSON text, where the quote of IMG is escaped.
  await assertInert(url("/turn", { ns: "alpha", id: "lg-thread" }), [`${SCRIPT}${IMG}`.replaceAll('"', '\\"')]);
});

test("payloads typed into filters and the sign-in page's next come back as text", async () => {
  await assertInert(url("/turns", { ns: "alpha", prefix: IMG, session: SCRIPT }), []);
  assert.equal(await page.locator('form#filters [name="prefix"]').inputValue(), IMG);
  assert.equal(await page.locator('form#filters [name="session"]').inputValue(), SCRIPT);
  await assertInert(url("/keys", { ns: "alpha", prefix: IMG }), []);
  await assertInert(url("/waits", { ns: "alpha", turn: IMG }), []);
  const signedOut = await browser.newContext({ baseURL: page.url() });
  const other = await signedOut.newPage();
  const dialogs = [];
  other.on("dialog", (d) => dialogs.push(d.message()));
  await other.goto(url("/signin", { next: `/turns?x=${IMG}${SCRIPT}` }));
  assert.equal(await other.locator('img[src="x"], [onerror]').count(), 0);
  assert.equal(await other.locator('input[name="next"]').inputValue(), `/turns?x=${IMG}${SCRIPT}`);
  assert.deepEqual(dialogs, []);
  await signedOut.close();
});

test("a confirmation page repeats payload fields as text", async () => {
  await page.goto(url("/keys", { ns: "alpha", state: "all", prefix: "xss-" }));
  const csrf = await csrfOf(page);
  // The form the browser would post, to a page it then shows: built here so the fields carry payloads.
  await page.evaluate(
    ({ csrf, key, error }) => {
      const form = document.createElement("form");
      form.method = "post";
      form.action = "/actions/release-key";
      for (const [name, value] of Object.entries({ csrf, ns: "alpha", key, error, permanent: "on" })) {
        const input = document.createElement("input");
        input.type = "hidden";
        input.name = name;
        input.value = value;
        form.append(input);
      }
      document.body.append(form);
      form.submit();
    },
    { csrf, key: `${XSS_TURN}/${IMG}`, error: `${SCRIPT}${QUOTES}` },
  );
  await page.locator('input[name="confirmed"][value="1"]').waitFor({ state: "attached" });
  await assertInert(undefined, []);
  assert.equal(await page.locator('form[action="/actions/release-key"] [name="key"]').inputValue(), `${XSS_TURN}/${IMG}`);
  assert.equal(await page.locator('form[action="/actions/release-key"] [name="error"]').inputValue(), `${SCRIPT}${QUOTES}`);
});
