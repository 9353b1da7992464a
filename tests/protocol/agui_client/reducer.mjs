// The real @ag-ui/client 1.0.0 reducer, for tests/protocol/test_conversation_differential.py.
// Reads one request per line on stdin, {events, messages, state}, and answers one line per
// request, {messages, state, error?}: agent.messages and agent.state after AbstractAgent.runAgent()
// ran the events through the client's whole pipeline (enforcement, chunk expansion,
// verification, defaultApplyEvents), as an application using @ag-ui/client would hold them.
import { createInterface } from "node:readline";
import { AbstractAgent } from "@ag-ui/client";
import { from } from "rxjs";

process.env.SUPPRESS_TRANSFORMATION_WARNINGS = "true";
let warnings = [];
// The client warns on stderr; nobody reads it here, and a full pipe would stall the process.
console.warn = (...args) => warnings.push(args.map(String).join(" ").slice(0, 300));
console.error = console.warn;
console.log = console.warn;

class Replay extends AbstractAgent {
  constructor(events, messages, state) {
    super({ threadId: "thread-diff", initialMessages: messages, initialState: state });
    this.events = events;
  }
  run() {
    return from(this.events);
  }
}

async function answer(request) {
  warnings = [];
  let events = request.events;
  // A stream the tests give without its run around it gets one: RUN_STARTED without input and a
  // plain RUN_FINISHED change no message and no state.
  if (events.length === 0 || events[0].type !== "RUN_STARTED") {
    events = [{ type: "RUN_STARTED", threadId: "thread-diff", runId: "run-diff" }, ...events];
  }
  const last = events[events.length - 1].type;
  if (last !== "RUN_FINISHED" && last !== "RUN_ERROR") {
    events = [...events, { type: "RUN_FINISHED", threadId: "thread-diff", runId: "run-diff" }];
  }
  const agent = new Replay(events, request.messages ?? [], request.state ?? {});
  let error;
  try {
    await agent.runAgent({ runId: "run-diff" });
  } catch (problem) {
    error = String(problem?.message ?? problem).slice(0, 500);
  }
  return { messages: agent.messages, state: agent.state === undefined ? null : agent.state,
           ...(error !== undefined && { error }), warnings };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let reply;
  try {
    reply = await answer(JSON.parse(line));
  } catch (problem) {
    reply = { error: `reducer.mjs: ${problem?.stack ?? problem}` };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
