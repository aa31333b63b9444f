// A LangGraph.js graph that stops for a person's approval and resumes, its
// checkpoints kept by a stepwell sidecar. The client README shows this file;
// test.sh runs it in a fresh project after the README's LangGraph install.
import { Annotation, Command, END, START, StateGraph, interrupt } from "@langchain/langgraph";
import { StepwellSaver } from "@stepwell/client/langgraph";

const State = Annotation.Root({ order: Annotation(), status: Annotation() });
const graph = new StateGraph(State)
  .addNode("draft", () => ({ status: "drafted" }))
  .addNode("approve", (s) => ({ status: interrupt({ question: `ship ${s.order}?` }) === "yes" ? "approved" : "rejected" }))
  .addEdge(START, "draft")
  .addEdge("draft", "approve")
  .addEdge("approve", END);

const checkpointer = StepwellSaver.fromAddress(process.env.STEPWELL_TARGET ?? "127.0.0.1:50051", { namespace: "examples" });
const app = graph.compile({ checkpointer });
const config = { configurable: { thread_id: `order-${process.pid}` } };
const paused = await app.invoke({ order: "A-17" }, config);        // stops at interrupt()
console.log(paused.__interrupt__[0].value.question);               // ship A-17?
// Later, in this process or any other: resume the thread with the answer.
const done = await app.invoke(new Command({ resume: "yes" }), config);
console.log(done.status);                                          // approved
await checkpointer.close();
