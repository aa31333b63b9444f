// A worker process for the crash and fencing specs: it runs the chain graph
// of graphs.ts on one thread through a StepwellSaver of its own (a client of
// its own, as any other process would have), so a spec can SIGKILL it
// mid-run, or run two of them against one thread. Its one argument is a
// WorkerArgs object as JSON. It prints "blocked" when the run enters the
// blocker node, then, when the run ends, "done <final state as JSON>" and
// exits 0, or "error <{name, message, threadId} as JSON>" and exits 1.
import { StepwellSaver } from "../../src/langgraph/index.js";
import { chainGraph, type WorkerArgs } from "./graphs.js";

async function main(args: WorkerArgs): Promise<number> {
  const saver = StepwellSaver.fromAddress(args.target, { namespace: args.namespace, fenced: args.fenced, leaseMs: args.leaseMs });
  const graph = chainGraph({ who: args.who, logFile: args.logFile, gateFile: args.gateFile, onBlocked: () => console.log("blocked") }, saver);
  const config = { configurable: { thread_id: args.threadId } };
  const run = () => graph.invoke(args.input ?? null, config);
  try {
    const out = args.holdLease ? await saver.threadLease(args.threadId, run) : await run();
    console.log(`done ${JSON.stringify(out)}`);
    return 0;
  } catch (err) {
    const e = err as Error & { threadId?: string };
    console.log(`error ${JSON.stringify({ name: e.constructor?.name ?? "Error", message: String(e.message), threadId: e.threadId })}`);
    return 1;
  } finally {
    await saver.close();
  }
}

process.exitCode = await main(JSON.parse(process.argv[2]!) as WorkerArgs);
