// The attacker-controlled text the console must show as inert text: turn
// ids, phases, states, key names, errors, wait names and metadata carry
// these, and the XSS test looks for each one literally on every page.

/** A script element. */
export const SCRIPT = "<script>alert(1)</script>";
/** Breaks out of a quoted attribute into an element with a handler. */
export const IMG = `"><img src=x onerror=alert(1)>`;
/** Single and double quotes, an ampersand and markup. */
export const QUOTES = `it's "quoted" & <b>bold</b>`;
/** The id of the principal that settles waits, shown as "settled by". */
export const XSS_PRINCIPAL = `${IMG}${SCRIPT}`;

/** Turn ids built of the payloads (no control characters, as the API asks). */
export const XSS_TURN = `xss-${SCRIPT}`;
export const XSS_TURN_2 = `xss-${IMG}${QUOTES}`;
