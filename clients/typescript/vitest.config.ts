// Vitest runs the LangGraph saver's, the Agents SDK session's and the ADK
// session service's specs (test/{langgraph,agents,adk}/*.spec.ts, as tsc
// compiled them into dist/test): the official checkpoint validator needs
// Vitest's globals. Everything else is tested with node's own runner
// (test.sh).
import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["dist/test/langgraph/**/*.spec.js", "dist/test/agents/**/*.spec.js", "dist/test/adk/**/*.spec.js"],
    globals: true,
    testTimeout: 120_000,
    hookTimeout: 120_000,
    // One file at a time: each starts its own sidecars, and CI has two cores.
    fileParallelism: false,
  },
});
