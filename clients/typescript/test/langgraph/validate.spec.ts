// LangGraph.js's official checkpoint validator (pinned
// @langchain/langgraph-checkpoint-validation 1.1.1, through its library
// entry point) against StepwellSaver on SQLite and on Postgres, every
// checkpointer in a fresh namespace, plus the opt-in getDeltaChannelHistory
// suite.
import { deltaChannelHistoryTests, validate } from "@langchain/langgraph-checkpoint-validation";
import { StepwellSaver } from "../../src/langgraph/index.js";
import { freshNamespace, type Sidecar } from "../sidecar.js";
import { BACKENDS, startBackend } from "./backends.js";

for (const backend of BACKENDS) {
  let sidecar: Sidecar | undefined;
  const initializer = {
    checkpointerName: `StepwellSaver (${backend})`,
    beforeAllTimeout: 60_000,
    async beforeAll() {
      sidecar = await startBackend(backend);
    },
    async afterAll() {
      await sidecar?.stop();
    },
    createCheckpointer() {
      return StepwellSaver.fromAddress(sidecar!.target, { namespace: freshNamespace(`lgjs-${backend}`) });
    },
    async destroyCheckpointer(saver: StepwellSaver) {
      await saver.close();
    },
  };
  validate(initializer);
  deltaChannelHistoryTests(initializer);
}
