// The TypeScript scenario worker of clients/scenarios/README.md ("Worker
// steps"): a run that pauses for a person (approval), one that sleeps
// durably (sleep), and a one-shot signal (signal), each a process of its own
// that the scenario runners of every language start, kill and start again.
// Run compiled: node dist/test/scenario-worker.js <command> --target ... .
import { appendFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { StepwellClient } from "../src/index.js";

const USAGE = `usage:
  scenario-worker approval --target HOST:PORT --namespace NS --run RUN --effects FILE
  scenario-worker sleep    --target HOST:PORT --namespace NS --run RUN --effects FILE --seconds S
  scenario-worker signal   --target HOST:PORT --namespace NS --run RUN --name NAME --payload TEXT`;

interface Args {
  target: string;
  namespace: string;
  run: string;
  effects?: string;
  seconds?: string;
  name?: string;
  payload?: string;
}

function need(args: Args, ...names: (keyof Args)[]): void {
  for (const n of names) if (args[n] === undefined) throw new Error(`--${n} is required\n${USAGE}`);
}

/** Restores the turn, and checkpoints `phase` when it has no checkpoint yet (a first worker of the run). */
async function begin(client: StepwellClient, run: string, phase: string): Promise<void> {
  if ((await client.restore(run)).length === 0) {
    await client.checkpoint({ turnId: run, phase, state: {}, timestamp: new Date() });
  }
}

/** The effect, at most once per run however often its workers die: one line in the effects file. */
function effect(client: StepwellClient, args: Args, payload: string): Promise<string> {
  return client.once(`${args.run}/effect`, () => {
    appendFileSync(args.effects!, `${args.run} ${payload}\n`);
    return `done:${payload}`;
  });
}

async function approval(client: StepwellClient, args: Args): Promise<void> {
  need(args, "effects");
  await begin(client, args.run, "waiting");
  await client.createWait(args.run, { name: "approve" });
  console.log("waiting");
  const payload = new TextDecoder().decode(await client.waitForSignal(args.run, "approve"));
  const result = await effect(client, args, payload);
  await client.checkpoint({ turnId: args.run, phase: "done", state: { result }, timestamp: new Date() });
  console.log(`done ${result}`);
}

async function sleep(client: StepwellClient, args: Args): Promise<void> {
  need(args, "effects", "seconds");
  await begin(client, args.run, "sleeping");
  // A later worker of the run asks a later time; the first creation of the wait, and its timer, stand.
  const when = new Date(Date.now() + Number(args.seconds) * 1000);
  await client.createWait(args.run, { name: "nap", resolveAt: when });
  console.log("sleeping");
  await client.sleepUntil(args.run, "nap", when);
  await effect(client, args, "");
  await client.checkpoint({ turnId: args.run, phase: "woke", state: {}, timestamp: new Date() });
  console.log("woke");
}

async function signal(client: StepwellClient, args: Args): Promise<void> {
  need(args, "name", "payload");
  const settled = await client.signal(args.run, args.name!, args.payload!);
  console.log(settled ? "settled" : "repeat");
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  const { values } = parseArgs({
    args: rest,
    options: Object.fromEntries(["target", "namespace", "run", "effects", "seconds", "name", "payload"].map((o) => [o, { type: "string" as const }])),
  });
  const args = values as unknown as Args;
  need(args, "target", "namespace", "run");
  const run = { approval, sleep, signal }[command ?? ""];
  if (!run) throw new Error(`unknown command ${JSON.stringify(command)}\n${USAGE}`);
  const client = new StepwellClient({ target: args.target, namespace: args.namespace });
  try {
    await run(client, args);
  } finally {
    client.close();
  }
}

main(process.argv.slice(2)).then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(`scenario-worker: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
