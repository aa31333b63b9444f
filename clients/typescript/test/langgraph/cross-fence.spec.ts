// Fencing across languages, on SQLite and on Postgres: a Python saver
// (stepwell.langgraph, run by STEPWELL_TEST_PYTHON) holding a thread's lease
// keeps a fenced JavaScript saver off the thread with ThreadBusy, and the
// JavaScript saver gets the thread once Python releases it. Both languages
// name a thread's lease alike, long thread ids (hashed) included.
import { spawn, spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { emptyCheckpoint, uuid6 } from "@langchain/langgraph-checkpoint";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { StepwellSaver, ThreadBusy, threadLeaseKey } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";

/** The Python with stepwell.langgraph: STEPWELL_TEST_PYTHON, or the Python client's test venv. */
function python(): string {
  const py = process.env.STEPWELL_TEST_PYTHON || join(process.env.STEPWELL_CACHE_DIR || join(homedir(), ".cache", "stepwell"), "py-test", "bin", "python");
  const probe = existsSync(py) ? spawnSync(py, ["-c", "import stepwell.langgraph"], { encoding: "utf8" }) : undefined;
  if (probe?.status !== 0) throw new Error(`no Python with stepwell.langgraph at ${py} (run clients/python/test first, or set STEPWELL_TEST_PYTHON): ${probe?.stderr ?? "missing"}`);
  return py;
}

// Holds the lease of argv[3] in namespace argv[2] until a line arrives on stdin.
const HOLDER = `
import sys
from stepwell.langgraph import StepwellSaver
with StepwellSaver.from_address(sys.argv[1], namespace=sys.argv[2], fenced=True) as saver:
    with saver.thread_lease(sys.argv[3]):
        print("held", flush=True)
        sys.stdin.readline()
print("released", flush=True)
`;

for (const backend of BACKENDS) {
  describe(`fencing across languages (${backend})`, () => {
    let sidecar: Sidecar;
    beforeAll(async () => {
      sidecar = await startBackend(backend);
    });
    afterAll(async () => {
      await sidecar?.stop();
    });

    it("both languages lease a thread under one key", () => {
      const ids = ["t-1", "ü".repeat(200)];
      const out = spawnSync(python(), ["-c", "import json,sys\nfrom stepwell.langgraph import thread_lease_key\nprint(json.dumps([thread_lease_key(t) for t in json.loads(sys.argv[1])]))", JSON.stringify(ids)], { encoding: "utf8" });
      expect(out.status, out.stderr).toBe(0);
      expect(JSON.parse(out.stdout)).toEqual(ids.map(threadLeaseKey));
      expect(threadLeaseKey(ids[1])).toMatch(/^langgraph-thread-sha256:[0-9a-f]{64}$/);
    });

    it("a thread Python holds is busy for a fenced JavaScript saver until Python lets go", async () => {
      const namespace = freshNamespace(`lgjs-xfence-${backend}`);
      const holder = spawn(python(), ["-c", HOLDER, sidecar.target, namespace, "shared"], { stdio: ["pipe", "pipe", "inherit"] });
      const lines = createInterface({ input: holder.stdout! })[Symbol.asyncIterator]();
      const saver = StepwellSaver.fromAddress(sidecar.target, { namespace, fenced: true });
      try {
        expect((await lines.next()).value).toBe("held");
        const cp = { ...emptyCheckpoint(), id: uuid6(-1) };
        const config = { configurable: { thread_id: "shared", checkpoint_ns: "" } };
        const err = await saver.put(config, cp, { source: "input", step: -1, parents: {} }, {}).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(ThreadBusy);
        expect((err as ThreadBusy).threadId).toBe("shared");
        expect(await saver.getTuple(config)).toBeUndefined();

        holder.stdin!.end("go\n");
        expect((await lines.next()).value).toBe("released");
        await saver.put(config, cp, { source: "input", step: -1, parents: {} }, {});
        expect((await saver.getTuple(config))?.checkpoint.id).toBe(cp.id);
      } finally {
        holder.kill();
        await saver.close();
      }
    });
  });
}
