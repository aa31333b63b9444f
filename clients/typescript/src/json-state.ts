// The check that a checkpoint's state round-trips through JSON. The
// DurableExecutor contract requires state that is JSON-serialisable end to
// end, and JSON.stringify alone does not hold a caller to it: it turns a Map
// into {}, a function or NaN into null and a Date into a string, so a state
// that is not JSON would be stored altered and restored as something else.
// The executor refuses such a state instead, before anything is sent.

/** What JSON cannot hold, named for the error message; undefined when the value is plain JSON data. */
function unsupported(value: unknown): string | undefined {
  switch (typeof value) {
    case "string":
    case "boolean":
      return undefined;
    case "number":
      return Number.isFinite(value) ? undefined : `the number ${String(value)}`;
    case "bigint":
      return "a bigint";
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
    case "undefined":
      return "undefined";
  }
  if (value === null || Array.isArray(value)) return undefined;
  const proto = Object.getPrototypeOf(value) as object | null;
  if (proto === Object.prototype || proto === null) {
    if (typeof (value as { toJSON?: unknown }).toJSON === "function") return "an object with a toJSON method";
    if (Object.getOwnPropertySymbols(value).length > 0) return "an object with symbol keys";
    return undefined;
  }
  const name = (proto as { constructor?: { name?: unknown } }).constructor?.name;
  if (typeof name !== "string" || name === "") return "an object that is not a plain object";
  return `${/^[AEIO]/.test(name) ? "an" : "a"} ${name}`;
}

/** The path of the first part of value that does not round-trip through JSON, and what it is; undefined when all of it does. */
function firstUnsupported(value: unknown, path: string, ancestors: Set<object>): string | undefined {
  const what = unsupported(value);
  if (what !== undefined) return `${path} is ${what}`;
  if (value === null || typeof value !== "object") return undefined;
  if (ancestors.has(value)) return `${path} refers back to an object that contains it`;
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i++) {
        if (!(i in value)) return `${path}[${i}] is a hole in the array`;
        const found = firstUnsupported(value[i], `${path}[${i}]`, ancestors);
        if (found !== undefined) return found;
      }
      return undefined;
    }
    for (const [key, v] of Object.entries(value)) {
      // A property whose value is undefined is absent in JSON, as it is to every reader of the object.
      if (v === undefined) continue;
      const found = firstUnsupported(v, `${path}${/^[A-Za-z_$][\w$]*$/.test(key) ? `.${key}` : `[${JSON.stringify(key)}]`}`, ancestors);
      if (found !== undefined) return found;
    }
    return undefined;
  } finally {
    ancestors.delete(value);
  }
}

/**
 * Throws a TypeError naming the first part of `state` that does not
 * round-trip through JSON: anything but null, booleans, finite numbers,
 * strings, arrays without holes and plain objects of those (a Map, a Set, a
 * Date, a class instance, an AbortController, a function, a bigint, a
 * symbol, NaN or Infinity, undefined outside an object property, an object
 * with toJSON or symbol keys, a cycle). An object property whose value is
 * undefined is allowed: JSON leaves it out, and reading it gives undefined
 * either way.
 */
export function assertJsonState(state: unknown): void {
  const found = firstUnsupported(state, "state", new Set());
  if (found !== undefined) {
    throw new TypeError(
      `checkpoint state must round-trip through JSON (the DurableExecutor contract): ${found}; nothing was stored`,
    );
  }
}
