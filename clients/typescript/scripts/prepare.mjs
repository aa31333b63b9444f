// npm's `prepare` step of @stepwell/client: makes dist/ from src/ wherever
// npm prepares this folder. A plain `npm install /path/to/clients/typescript`
// links the folder and runs this script in it without installing the
// folder's own dependencies, so when they are missing this script first runs
// `npm ci` here (lifecycle scripts off, so it does not come back here), with
// the settings of the outer install that would aim it elsewhere removed. Then
// it compiles the ES module build (dist/src) and the CommonJS build
// (dist/cjs), each with its type declarations, and notes in
// dist/.built-from a digest of what they were made from (src/, the
// tsconfig files, package.json and the lock file): preparing the folder
// again with nothing changed compiles nothing.
//
// `node scripts/prepare.mjs --with-tests` (the client's ./build, for its
// own suites) compiles test/ into dist/test as well, and notes the digest
// of src/ and test/ in dist/.tests-built-from.
import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

function log(msg) {
  process.stderr.write(`@stepwell/client prepare: ${msg}\n`);
}

function run(cmd, args, env = process.env) {
  const r = spawnSync(cmd, args, { cwd: root, env, stdio: "inherit" });
  if (r.error) throw r.error;
  if (r.status !== 0) {
    log(`${[cmd, ...args].join(" ")} failed (${r.status ?? r.signal})`);
    process.exit(r.status ?? 1);
  }
}

/** Whether this folder has its own dependencies installed (what the build needs). */
function installed() {
  const needed = [...Object.keys(pkg.dependencies ?? {}), "typescript", "@types/node"];
  return existsSync(tsc) && needed.every((name) => existsSync(join(root, "node_modules", name, "package.json")));
}

// Settings an outer `npm install` passes down in the environment that would
// send the nested `npm ci` elsewhere or change what it installs.
const OUTER_SETTINGS = new Set([
  "prefix", "local_prefix", "global", "location", "install_links", "install_strategy", "global_style",
  "legacy_bundling", "omit", "include", "production", "only", "also", "dev", "optional", "dry_run",
  "workspace", "workspaces", "include_workspace_root", "workspaces_update", "package_lock", "package_lock_only",
  "save", "save_dev", "save_exact", "save_optional", "save_peer", "save_prod", "save_bundle", "save_prefix",
  "ignore_scripts", "engine_strict", "strict_peer_deps", "legacy_peer_deps", "force", "before", "lockfile_version",
]);

function nestedEnv() {
  const env = {};
  for (const [key, value] of Object.entries(process.env)) {
    const m = /^npm_config_(.*)$/i.exec(key);
    if (m && OUTER_SETTINGS.has(m[1].toLowerCase().replaceAll("-", "_"))) continue;
    env[key] = value;
  }
  env.STEPWELL_CLIENT_PREPARE_NESTED = "1";
  return env;
}

if (!installed()) {
  if (process.env.STEPWELL_CLIENT_PREPARE_NESTED) {
    log("the nested npm ci left dependencies missing");
    process.exit(1);
  }
  log("installing this folder's locked dependencies (npm ci) to build it");
  // npm_execpath is the npm that runs this script; otherwise npm from PATH.
  const npmCli = process.env.npm_execpath;
  const args = ["ci", "--ignore-scripts", "--include=dev", "--no-audit", "--no-fund", "--install-links=false", "--engine-strict=false"];
  if (npmCli && /\.[cm]?js$/.test(npmCli)) run(process.execPath, [npmCli, ...args], nestedEnv());
  else run(process.platform === "win32" ? "npm.cmd" : "npm", args, nestedEnv());
}

/** The files under `dir` (relative to the folder), recursively. */
function filesUnder(dir) {
  const at = join(root, dir);
  if (!existsSync(at)) return [];
  return readdirSync(at, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => relative(root, join(entry.parentPath ?? entry.path, entry.name)));
}

/** A digest of the sources under `dirs` and of the files that decide how they compile. */
function digestOf(dirs) {
  const files = ["package.json", "package-lock.json", "tsconfig.json", "tsconfig.build.json", "tsconfig.cjs.json"]
    .concat(...dirs.map(filesUnder))
    .filter((file) => existsSync(join(root, file)))
    .sort();
  const hash = createHash("sha256");
  for (const file of files) hash.update(`${file}\0`).update(readFileSync(join(root, file))).update("\0");
  return hash.digest("hex");
}

const withTests = process.argv.includes("--with-tests");
const stampFile = join(root, "dist", withTests ? ".tests-built-from" : ".built-from");
const digest = digestOf(withTests ? ["src", "test"] : ["src"]);
const built = existsSync(stampFile) && readFileSync(stampFile, "utf8") === digest;
if (built && existsSync(join(root, "dist", "src", "index.js")) && existsSync(join(root, "dist", "cjs", "index.js"))) {
  log("dist/ is up to date with its sources");
  process.exit(0);
}
for (const dir of ["src", "cjs", "test", ".built-from", ".tests-built-from"]) {
  rmSync(join(root, "dist", dir), { recursive: true, force: true });
}
log(`compiling dist/src (ES modules)${withTests ? ", dist/test" : ""} and dist/cjs (CommonJS)`);
// tsconfig.json compiles src/ and test/ into dist/src and dist/test;
// tsconfig.build.json, src/ alone.
run(process.execPath, [tsc, "-p", withTests ? "tsconfig.json" : "tsconfig.build.json"]);
run(process.execPath, [tsc, "-p", "tsconfig.cjs.json"]);
// Node reads dist/cjs/*.js as CommonJS because of this file (the package itself is "type": "module").
writeFileSync(join(root, "dist", "cjs", "package.json"), '{ "type": "commonjs" }\n');
writeFileSync(join(root, "dist", ".built-from"), digestOf(["src"]));
if (withTests) writeFileSync(stampFile, digest);
