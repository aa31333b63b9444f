// The agents of the agent specs and of their worker program: a triage agent
// on the fake model with four tools and a handoff to a specialist. Built here
// once, so the worker process and the test process run the very same tools.
// Every tool with an effect appends "who:tool:arg" to a side-effect log file
// outside the store when it runs, so a spec can count the runs.
import { appendFileSync, existsSync } from "node:fs";
import { Agent, tool } from "@openai/agents-core";
import { z } from "zod";
import type { StepwellClient } from "../../src/index.js";
import { runOnce } from "../../src/agents/index.js";
import { FakeModel } from "./fake-model.js";
import { waitFor } from "./harness.js";

export interface AgentOptions {
  client: StepwellClient;
  /** The run key of runOnce (the session id). */
  runKey: string;
  /** Names the process in the side-effect log. */
  who: string;
  logFile: string;
  /** The slow tool waits until this file exists; without it, it does not wait. */
  gateFile?: string;
  /** Called when the slow tool starts, before it waits. */
  onBlocked?: () => void;
}

const PAST: Record<string, string> = { note: "noted", charge: "charged", slow: "slowed" };
const Arg = z.object({ arg: z.string() });

/** The triage agent: look (no effect), note and charge (run once; charge needs approval), slow (blocks on the gate), and a handoff. */
export function triageAgent(o: AgentOptions): Agent<any, any> {
  const effect = (name: string) => async ({ arg }: { arg: string }) => {
    appendFileSync(o.logFile, `${o.who}:${name}:${arg}\n`);
    return `${PAST[name]} ${arg}`;
  };
  const look = tool({ name: "look", description: "Looks.", parameters: Arg, execute: async ({ arg }) => `saw ${arg}` });
  const note = tool({ name: "note", description: "Notes.", parameters: Arg, execute: runOnce(o.client, o.runKey, effect("note")) });
  const charge = tool({ name: "charge", description: "Charges.", parameters: Arg, needsApproval: async () => true, execute: runOnce(o.client, o.runKey, effect("charge")) });
  const slow = tool({
    name: "slow",
    description: "Waits for the gate.",
    parameters: Arg,
    execute: async (input) => {
      o.onBlocked?.();
      if (o.gateFile) await waitFor(() => existsSync(o.gateFile!), `the gate file ${o.gateFile}`, 600_000);
      return effect("slow")(input);
    },
  });
  const specialist = new Agent({ name: "specialist", instructions: "Answers.", model: new FakeModel("specialist:") });
  return new Agent({
    name: "triage",
    instructions: "Routes.",
    model: new FakeModel("triage:", "transfer_to_specialist"),
    tools: [look, note, charge, slow],
    handoffs: [specialist],
  });
}
