// The console without JavaScript, as curl sees it: signing in is a form
// POST, and each page then answers full HTML with its data already in it,
// every payload escaped, and the security headers (the strict CSP among
// them) on every answer, the sign-in page and the assets included.
import { before, test } from "node:test";
import assert from "node:assert/strict";
import { CSP, fixture } from "../lib/browser.mjs";
import { XSS_TURN } from "../lib/payloads.mjs";

let cookie;

/** A GET with the session cookie, redirects not followed. */
const get = (path) => fetch(`${fixture.base}${path}`, { headers: cookie ? { cookie } : {}, redirect: "manual" });

function assertHeaders(response, path) {
  assert.equal(response.headers.get("content-security-policy"), CSP, `${path}: CSP`);
  assert.equal(response.headers.get("x-content-type-options"), "nosniff", `${path}: nosniff`);
  assert.equal(response.headers.get("referrer-policy"), "no-referrer", `${path}: Referrer-Policy`);
  assert.match(response.headers.get("cache-control") ?? "", /no-store/, `${path}: Cache-Control`);
}

before(async () => {
  const signin = await fetch(`${fixture.base}/signin`, {
    method: "POST",
    headers: { "content-type": "application/x-www-form-urlencoded" },
    body: new URLSearchParams({ token: fixture.tokens.admin, next: "/" }),
    redirect: "manual",
  });
  assert.equal(signin.status, 303);
  assertHeaders(signin, "POST /signin");
  const setCookie = signin.headers.getSetCookie().find((c) => c.startsWith("stepwell_console="));
  assert.ok(setCookie, "no session cookie");
  assert.match(setCookie, /HttpOnly/i);
  assert.match(setCookie, /SameSite=Strict/i);
  cookie = setCookie.split(";")[0];
});

test("every page answers full HTML with its data, escaped, and the security headers", async () => {
  // Escaped, by name or by number: &lt; or &#60;.
  const escapedTurn = new RegExp(XSS_TURN.replace("(1)", "\\(1\\)").replaceAll("<", "&(lt|#60);").replaceAll(">", "&(gt|#62);"));
  const pages = {
    "/": ['data-ns="alpha"', "Open turns", "store up"],
    "/turns?ns=alpha&status=all&prefix=terminal-": ['data-turn="terminal-1"', "s-filter"],
    "/turn?ns=alpha&id=skew-1": ["skew-1", 'data-phase="ahead"', 'data-phase="behind"', "skewed"],
    "/keys?ns=alpha&state=failed&prefix=terminal-1": ['data-key="terminal-1/failed"', "card declined"],
    "/waits?ns=alpha&status=pending&turn=open-1": ['data-wait="open-1/approval"', "approval"],
    [`/turns?ns=alpha&status=all&prefix=xss-`]: [escapedTurn],
  };
  for (const [path, needles] of Object.entries(pages)) {
    const response = await get(path);
    assert.equal(response.status, 200, path);
    assert.match(response.headers.get("content-type"), /^text\/html/, path);
    assertHeaders(response, path);
    const html = await response.text();
    assert.match(html, /^<!doctype html>/i, `${path}: a whole document`);
    assert.match(html, /<\/html>\s*$/i, `${path}: a whole document`);
    for (const needle of needles) {
      const found = typeof needle === "string" ? html.includes(needle) : needle.test(html);
      assert.ok(found, `${path}: ${needle} missing from the HTML`);
    }
    assert.ok(!html.includes("<script>alert(1)</script>"), `${path}: a payload unescaped`);
  }
});

test("the sign-in page, a refusal and the assets carry the headers too", async () => {
  const saved = cookie;
  cookie = undefined;
  const signin = await get("/signin");
  assert.equal(signin.status, 200);
  assertHeaders(signin, "/signin");
  const redirect = await get("/turns?ns=alpha");
  assert.equal(redirect.status, 303);
  assert.match(redirect.headers.get("location"), /^\/signin\?next=/);
  assertHeaders(redirect, "a redirect to /signin");
  cookie = saved;
  for (const [path, type] of [
    ["/assets/console.css", /^text\/css/],
    ["/assets/console.js", /javascript/],
  ]) {
    const asset = await get(path);
    assert.equal(asset.status, 200, path);
    assert.match(asset.headers.get("content-type"), type, path);
    assert.equal(asset.headers.get("x-content-type-options"), "nosniff", path);
  }
});

test("without JavaScript a lease countdown reads as text", async () => {
  const html = await (await get("/keys?ns=alpha&state=in_progress&prefix=open-1/charge")).text();
  const countdown = /<time class="countdown"[^>]*datetime="([^"]+)"[^>]*>([^<]+)<\/time>/.exec(html);
  assert.ok(countdown, "no countdown in the keys page");
  assert.ok(Date.parse(countdown[1]) > Date.now());
  assert.match(countdown[2], /expires in \d/);
});
