// A worker process for the crash and approval specs: it runs the triage
// agent of agents.ts on one StepwellSession, with a client of its own, as
// any other process would. Its one argument is a WorkerArgs object as JSON.
// Commands:
// - "turns": runs each input as a turn, printing "turn <final output>"; the
//   slow tool prints "blocked" when it starts;
// - "ask": runs one input that stops for an approval, saves the RunState
//   under runId and prints "interrupted <call id>";
// - "resume": loads the saved state, prints "waiting", awaits the approval
//   signal, applies it and resumes the run, printing "turn <final output>".
// It prints "done" and exits 0 when it finished, or "error <message>" and 1.
import { RunState, run } from "@openai/agents-core";
import { StepwellClient } from "../../src/index.js";
import { StepwellSession, applyApproval, awaitApproval, loadRunState, saveRunState } from "../../src/agents/index.js";
import { triageAgent } from "./agents.js";
import "./harness.js";

export interface WorkerArgs {
  command: "turns" | "ask" | "resume";
  target: string;
  namespace: string;
  sessionId: string;
  who: string;
  logFile: string;
  gateFile?: string;
  inputs?: string[];
  runId?: string;
}

async function main(a: WorkerArgs): Promise<void> {
  const client = new StepwellClient({ target: a.target, namespace: a.namespace });
  const session = new StepwellSession(client, { sessionId: a.sessionId, namespace: a.namespace });
  const agent = triageAgent({ client, runKey: a.sessionId, who: a.who, logFile: a.logFile, gateFile: a.gateFile, onBlocked: () => console.log("blocked") });
  const ref = { sessionId: a.sessionId, runId: a.runId ?? "run", namespace: a.namespace };
  try {
    if (a.command === "turns") {
      for (const input of a.inputs ?? []) console.log(`turn ${(await run(agent, input, { session })).finalOutput}`);
    } else if (a.command === "ask") {
      const result = await run(agent, a.inputs![0]!, { session });
      if (result.interruptions.length !== 1) throw new Error(`expected one interruption, got ${result.interruptions.length}`);
      await saveRunState(client, ref, result.state);
      console.log(`interrupted ${(result.interruptions[0]!.rawItem as { callId: string }).callId}`);
    } else {
      const state = await RunState.fromString(agent, (await loadRunState(client, ref))!);
      console.log("waiting");
      for (const item of state.getInterruptions()) applyApproval(state, item, await awaitApproval(client, ref, item, { timeoutMs: 120_000 }));
      console.log(`turn ${(await run(agent, state, { session })).finalOutput}`);
    }
    console.log("done");
  } finally {
    client.close();
  }
}

main(JSON.parse(process.argv[2]!) as WorkerArgs).catch((err: unknown) => {
  console.log(`error ${String((err as Error)?.stack ?? err).replaceAll("\n", " | ")}`);
  process.exitCode = 1;
});
