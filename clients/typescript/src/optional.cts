// Loads an optional package with require() from the client's own location,
// the same way in the ES module and the CommonJS builds (a .cts file is
// always compiled to CommonJS, so `require` is this file's).
export function requireOptional(id: string): unknown {
  try {
    return require(id);
  } catch {
    return undefined; // not installed, or failed to load
  }
}
