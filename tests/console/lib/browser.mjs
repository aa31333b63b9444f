// What every console test file shares: the fixture main.mjs wrote, the
// system's chromium launched headless by playwright-core (never a
// downloaded browser) with the flags that keep it off the network, a
// context per person signed in through the sign-in page, a guard that fails
// a test on any dialog (an alert() an injected script would raise), full-page
// screenshots into the artifacts folder, and a polling helper for
// conditions Playwright's own waiting does not cover.
import { readFileSync } from "node:fs";
import { until } from "./sidecar.mjs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { AxeBuilder } from "@axe-core/playwright";

export const fixture = JSON.parse(readFileSync(process.env.STEPWELL_CONSOLE_FIXTURE, "utf8"));
export const { base } = fixture;

/** The CSP every answer carries. */
export const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

export { until };

/** Debian's chromium, headless, with a fresh profile that Playwright makes and removes. */
export async function launch() {
  return chromium.launch({
    executablePath: process.env.STEPWELL_CHROMIUM ?? "/usr/bin/chromium",
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
}

/**
 * A fresh context (its own cookies) whose pages fail the test on any
 * dialog: `dialogs` collects them, and `assertNoDialog` checks it.
 */
export async function newContext(browser, opts = {}) {
  const context = await browser.newContext({ baseURL: base, ...opts });
  const dialogs = [];
  context.on("page", (page) => {
    page.on("dialog", (d) => {
      dialogs.push(d.message());
      d.dismiss().catch(() => {});
    });
  });
  context.dialogs = dialogs;
  return context;
}

/** Signs in through the form, as a person would; returns the page, left where `next` led. */
export async function signIn(context, who, next = "/") {
  const page = await context.newPage();
  await page.goto(`/signin?next=${encodeURIComponent(next)}`);
  await page.locator("#token").fill(fixture.tokens[who]);
  await Promise.all([page.waitForURL((u) => u.pathname !== "/signin"), page.getByRole("button", { name: "Sign in" }).click()]);
  return page;
}

/** A signed-in context of `who`. */
export async function personContext(browser, who) {
  const context = await newContext(browser);
  const page = await signIn(context, who);
  await page.close();
  return context;
}

/** Loads a page and checks its HTTP status. */
export async function open(page, path, status = 200) {
  const response = await page.goto(path);
  if (response.status() !== status) {
    throw new Error(`GET ${path}: ${response.status()}, expected ${status}\n${(await response.text()).slice(0, 2000)}`);
  }
  return response;
}

/** The URL of a page of the console, its query from an object. */
export function url(path, query = {}) {
  const q = new URLSearchParams(query).toString();
  return q ? `${path}?${q}` : path;
}

/** A full-page screenshot, named by page and backend. */
export async function screenshot(page, name) {
  await page.screenshot({ path: join(fixture.artifacts, `${name}-${fixture.backend}.png`), fullPage: true });
}

/** axe-core's violations of impact serious or critical on the page as it is now. */
export async function seriousViolations(page) {
  const result = await new AxeBuilder({ page }).analyze();
  return result.violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(" ")).join(", ")}`);
}

/** The text of the rows' data attribute `attr` in the table `#table`. */
export async function rowKeys(page, table, attr) {
  return page.locator(`table#${table} tr[data-${attr}]`).evaluateAll((rows, a) => rows.map((r) => r.getAttribute(`data-${a}`)), attr);
}

/** A table row's cells' text by their column headers (lower case), and the row's class. */
export async function cells(row) {
  return row.evaluate((tr) => {
    const headers = [...tr.closest("table").querySelectorAll("thead th")].map((th) => th.textContent.trim().toLowerCase());
    const out = { className: tr.className };
    [...tr.cells].forEach((td, i) => (out[headers[i] ?? i] = td.textContent.trim()));
    return out;
  });
}

/** The csrf token of the page's sign-out form. */
export async function csrfOf(page) {
  return page.locator('form[action="/signout"] input[name="csrf"]').inputValue();
}

/** The console's audit events in the sidecar's log (JSON lines) so far. */
export function auditEvents() {
  const events = [];
  for (const line of readFileSync(fixture.log, "utf8").split("\n")) {
    if (!line.startsWith("{")) continue;
    const event = JSON.parse(line);
    if (event.target === "stepwell::audit" && event.fields?.via === "console") events.push(event.fields);
  }
  return events;
}

/** Waits for an audit event whose fields equal `fields` (a function field is a test of it). */
export async function assertAudited(fields) {
  const matches = (e) => Object.entries(fields).every(([k, v]) => (typeof v === "function" ? v(e[k] ?? "") : e[k] === v));
  await until(() => auditEvents().some(matches), `an audit event ${JSON.stringify(fields)}`, 15_000);
}
