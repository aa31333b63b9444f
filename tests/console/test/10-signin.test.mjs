// Sign-in, sign-out and a deep link: a wrong token is refused with an alert
// and no cookie, a right one sets an HttpOnly, SameSite=Strict session
// cookie and lands on the page asked for, and signing out clears the cookie
// so that every page sends the person back to the sign-in page.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { fixture, launch, newContext, url } from "../lib/browser.mjs";

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

const sessionCookie = async (context) => (await context.cookies()).find((c) => c.name === "stepwell_console");

test("a page without a session redirects to the sign-in page, with the page as next", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  await page.goto(url("/turns", { ns: "alpha", status: "open" }));
  const at = new URL(page.url());
  assert.equal(at.pathname, "/signin");
  assert.equal(at.searchParams.get("next"), "/turns?ns=alpha&status=open");
  assert.equal(await page.locator('input[type="password"]#token[name="token"]').count(), 1);
  assert.deepEqual(context.dialogs, []);
  await context.close();
});

test("a wrong token is refused with 401 and an alert, and sets no session", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  await page.goto("/signin?next=%2F");
  await page.locator("#token").fill(`${fixture.tokens.admin}x`);
  const [response] = await Promise.all([
    page.waitForResponse((r) => r.request().method() === "POST" && new URL(r.url()).pathname === "/signin"),
    page.getByRole("button", { name: "Sign in" }).click(),
  ]);
  assert.equal(response.status(), 401);
  await page.getByRole("alert").waitFor();
  assert.equal(new URL(page.url()).pathname, "/signin");
  assert.equal(await sessionCookie(context), undefined);
  // Still signed out: a page sends the person back.
  await page.goto("/keys?ns=alpha");
  assert.equal(new URL(page.url()).pathname, "/signin");
  await context.close();
});

test("a right token sets an HttpOnly SameSite=Strict cookie, and signing out clears it", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  await page.goto("/signin?next=%2Fkeys%3Fns%3Dalpha");
  await page.locator("#token").fill(fixture.tokens.admin);
  await Promise.all([page.waitForURL((u) => u.pathname === "/keys"), page.getByRole("button", { name: "Sign in" }).click()]);
  assert.equal(new URL(page.url()).searchParams.get("ns"), "alpha");
  const cookie = await sessionCookie(context);
  assert.ok(cookie, "no stepwell_console cookie after signing in");
  assert.equal(cookie.httpOnly, true);
  assert.equal(cookie.sameSite, "Strict");
  assert.equal(cookie.path, "/");
  assert.ok(cookie.expires > Date.now() / 1000, "the cookie carries an expiry (Max-Age), so the session ends");
  // Scripts cannot read it.
  assert.equal(await page.evaluate(() => document.cookie.includes("stepwell_console")), false);

  await Promise.all([page.waitForURL((u) => u.pathname === "/signin"), page.getByRole("button", { name: "Sign out" }).click()]);
  assert.equal(await sessionCookie(context), undefined);
  for (const path of ["/", "/turns?ns=alpha", "/turn?ns=alpha&id=open-1", "/keys?ns=alpha", "/waits?ns=alpha"]) {
    await page.goto(path);
    assert.equal(new URL(page.url()).pathname, "/signin", `${path} after signing out`);
  }
  assert.deepEqual(context.dialogs, []);
  await context.close();
});

test("the old session's cookie no longer works after signing out", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  await page.goto("/signin?next=%2F");
  await page.locator("#token").fill(fixture.tokens.admin);
  await Promise.all([page.waitForURL((u) => u.pathname === "/"), page.getByRole("button", { name: "Sign in" }).click()]);
  const stolen = await sessionCookie(context);
  await Promise.all([page.waitForURL((u) => u.pathname === "/signin"), page.getByRole("button", { name: "Sign out" }).click()]);
  const replay = await fetch(`${fixture.base}/turns?ns=alpha`, { headers: { cookie: `${stolen.name}=${stolen.value}` }, redirect: "manual" });
  assert.equal(replay.status, 303);
  assert.match(replay.headers.get("location"), /^\/signin/);
  await context.close();
});

test("a next that leaves the console is not followed", async () => {
  for (const next of ["//elsewhere.example/", "https://elsewhere.example/", "/\\elsewhere.example"]) {
    const response = await fetch(`${fixture.base}/signin`, {
      method: "POST",
      headers: { "content-type": "application/x-www-form-urlencoded" },
      body: new URLSearchParams({ token: fixture.tokens.reader, next }),
      redirect: "manual",
    });
    assert.equal(response.status, 303, next);
    assert.equal(response.headers.get("location"), "/", next);
  }
});

test("a deep link opened signed out leads, after signing in, to the turn it names", async () => {
  const context = await newContext(browser);
  const page = await context.newPage();
  const deep = url("/turn", { ns: "alpha", id: "skew-1" });
  await page.goto(deep);
  assert.equal(new URL(page.url()).pathname, "/signin");
  await page.locator("#token").fill(fixture.tokens.reader);
  await Promise.all([page.waitForURL((u) => u.pathname === "/turn"), page.getByRole("button", { name: "Sign in" }).click()]);
  const at = new URL(page.url());
  assert.equal(at.searchParams.get("ns"), "alpha");
  assert.equal(at.searchParams.get("id"), "skew-1");
  assert.equal((await page.locator("h1").innerText()).includes("skew-1"), true);
  assert.equal(await page.locator('table#checkpoints tr[data-phase="ahead"]').count(), 1);
  await context.close();
});
