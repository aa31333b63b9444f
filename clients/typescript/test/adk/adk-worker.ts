// A worker process for the ADK restart spec: it runs the agent of agent.ts
// through ADK's Runner on a StepwellSessionService with a client of its own,
// as any other process would. Its one argument is a WorkerArgs object as
// JSON. It creates the session when it does not exist, runs each input as a
// turn, printing "turn <final text>" (the slow tool prints "blocked" when it
// starts), then prints "done" and exits 0, or "error <message>" and 1.
import { LogLevel, setLogLevel } from "@google/adk";
import { StepwellSessionService } from "../../src/adk/index.js";
import { runner, turn } from "./agent.js";

export interface WorkerArgs {
  target: string;
  namespace: string;
  userId: string;
  sessionId: string;
  who: string;
  gateFile?: string;
  inputs: string[];
}

async function main(a: WorkerArgs): Promise<void> {
  setLogLevel(LogLevel.ERROR);
  const sessions = StepwellSessionService.fromAddress(a.target, { namespace: a.namespace });
  try {
    await sessions.getOrCreateSession({ appName: "shop", userId: a.userId, sessionId: a.sessionId });
    const r = runner(sessions, `${a.who}:`, "shop", a.gateFile, () => console.log("blocked"));
    for (const input of a.inputs) console.log(`turn ${await turn(r, a.userId, a.sessionId, input)}`);
    console.log("done");
  } finally {
    sessions.close();
  }
}

main(JSON.parse(process.argv[2]!) as WorkerArgs).catch((err: unknown) => {
  console.log(`error ${String((err as Error)?.stack ?? err).replaceAll("\n", " | ")}`);
  process.exitCode = 1;
});
