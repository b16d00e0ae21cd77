// zinc serve's Responses API (POST /v1/responses) driven by the official OpenAI client's `responses`
// API (npm "openai", pinned in tests/oracle) over loopback: a response whose text is the Chat
// Completions endpoint's for the same conversation, the same response streamed (events accumulated by
// the client), instructions and input items, max_output_tokens making it incomplete, function tools
// and a call round trip reaching the template, and 400s for what it does not support.
// Usage: node responses_client.mjs ORACLE_DIR ZINC STORIES.gguf TEMPLATES_DIR
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, templates] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const { check, start: startServer, stopAll, failures } = testRun(zinc, model);

async function expectError(what, promise, status, param) {
  try {
    await promise;
    check(false, what, "no error");
  } catch (e) {
    check(e.status === status && (param === undefined || e.param === param), what, `status ${e.status} param ${e.param}: ${e.message}`);
  }
}

try {
  const s = await startServer(["-c", "512"]);
  const client = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const messages = [{ role: "user", content: "Once upon a time" }];

  const r = await client.responses.create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 24, temperature: 0 });
  const chat = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 24, temperature: 0 });
  check(r.object === "response" && r.id.startsWith("resp_") && r.model === "stories260K", "a response object",
        JSON.stringify(r).slice(0, 200));
  check(r.output_text === chat.choices[0].message.content && r.output.length === 1 && r.output[0].type === "message",
        "its text is the Chat Completions endpoint's", JSON.stringify(r.output).slice(0, 200));
  check(r.status === "incomplete" && r.incomplete_details?.reason === "max_output_tokens" && r.usage.output_tokens === 24 &&
        r.usage.input_tokens === chat.usage.prompt_tokens && r.usage.total_tokens === r.usage.input_tokens + 24,
        "max_output_tokens ends it incomplete, with usage", JSON.stringify({ status: r.status, usage: r.usage }));

  // The same as input items (an input_text part), streamed: the client accumulates the events.
  const stream = client.responses.stream({ model: "stories260K", max_output_tokens: 24, temperature: 0,
    input: [{ role: "user", content: [{ type: "input_text", text: "Once upon a time" }] }] });
  const types = [];
  for await (const e of stream) types.push(e.type);
  const final = await stream.finalResponse();
  const distinct = types.filter((t, i) => t !== types[i - 1]).join(",");
  check(distinct === "response.created,response.in_progress,response.output_item.added,response.content_part.added," +
        "response.output_text.delta,response.output_text.done,response.content_part.done,response.output_item.done,response.incomplete",
        "the stream's events in order", distinct);
  // (The client's accumulated response has no output_text convenience: the text is in its message item.)
  const streamed = final.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
  check(streamed === r.output_text, "the streamed response equals the whole one", streamed);

  // Instructions (a system message) reach the template; an ended answer is completed.
  const inst = await client.responses.create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 4,
                                               temperature: 0, instructions: "Tell a story." });
  check(inst.usage.input_tokens > r.usage.input_tokens, "instructions reach the template",
        `${inst.usage.input_tokens} vs ${r.usage.input_tokens}`);

  // Kept responses: previous_response_id puts the conversation a response ended before the new input.
  const first = await client.responses.create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 12, temperature: 0 });
  const next = await client.responses.create({ model: "stories260K", previous_response_id: first.id, input: "The end",
                                               max_output_tokens: 12, temperature: 0 });
  const whole = await client.responses.create({ model: "stories260K", max_output_tokens: 12, temperature: 0, store: false, input: [
    { role: "user", content: "Once upon a time" }, { role: "assistant", content: first.output_text }, { role: "user", content: "The end" }] });
  check(first.store === true && first.previous_response_id === null && next.previous_response_id === first.id &&
        whole.store === false, "a response says whether it is kept and what it continues",
        JSON.stringify([first.store, first.previous_response_id, next.previous_response_id, whole.store]));
  check(next.output_text === whole.output_text && next.usage.input_tokens === whole.usage.input_tokens,
        "previous_response_id continues the conversation: the same answer as sending it whole",
        JSON.stringify([next.output_text, whole.output_text, next.usage.input_tokens, whole.usage.input_tokens]));
  check(next.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens,
        "... evaluating only what the slot's cache does not hold", JSON.stringify([next.usage, first.usage.input_tokens]));
  // Streamed continuations are kept too, and chains go on.
  const streamedNext = client.responses.stream({ model: "stories260K", previous_response_id: next.id, input: "Again",
                                                 max_output_tokens: 6, temperature: 0 });
  for await (const e of streamedNext) void e;
  const third = await streamedNext.finalResponse();
  const fourth = await client.responses.create({ model: "stories260K", previous_response_id: third.id, input: "More",
                                                 max_output_tokens: 4, temperature: 0 });
  const thirdText = third.output.filter((o) => o.type === "message").flatMap((o) => o.content).map((c) => c.text).join("");
  const fourthWhole = await client.responses.create({ model: "stories260K", max_output_tokens: 4, temperature: 0, store: false, input: [
    { role: "user", content: "Once upon a time" }, { role: "assistant", content: first.output_text }, { role: "user", content: "The end" },
    { role: "assistant", content: next.output_text }, { role: "user", content: "Again" }, { role: "assistant", content: thirdText },
    { role: "user", content: "More" }] });
  check(fourth.usage.input_tokens === fourthWhole.usage.input_tokens && fourth.output_text === fourthWhole.output_text,
        "a chain through a streamed response holds every turn", JSON.stringify([fourth.usage, fourthWhole.usage]));
  // Instructions do not carry over: only the request's own apply.
  const instructed = await client.responses.create({ model: "stories260K", previous_response_id: first.id, input: "The end",
                                                     instructions: "Tell a story.", max_output_tokens: 2, temperature: 0 });
  const instructedNext = await client.responses.create({ model: "stories260K", previous_response_id: instructed.id, input: "x",
                                                         max_output_tokens: 2, temperature: 0 });
  const noInstructions = await client.responses.create({ model: "stories260K", store: false, max_output_tokens: 2, temperature: 0, input: [
    { role: "user", content: "Once upon a time" }, { role: "assistant", content: first.output_text }, { role: "user", content: "The end" },
    { role: "assistant", content: instructed.output_text }, { role: "user", content: "x" }] });
  check(instructed.usage.input_tokens > next.usage.input_tokens && instructedNext.usage.input_tokens === noInstructions.usage.input_tokens,
        "a response's instructions apply to it, not to those that continue it",
        JSON.stringify([instructed.usage.input_tokens, next.usage.input_tokens, instructedNext.usage.input_tokens, noInstructions.usage.input_tokens]));
  // GET and DELETE /v1/responses/{id}.
  const got = await client.responses.retrieve(first.id);
  check(got.id === first.id && got.output_text === first.output_text && got.usage.input_tokens === first.usage.input_tokens,
        "a kept response can be retrieved", JSON.stringify(got).slice(0, 200));
  await client.responses.delete(first.id);
  await expectError("a deleted response is gone", client.responses.retrieve(first.id), 404);
  await expectError("previous_response_id of a deleted response: 400", client.responses.create({ model: "stories260K",
    input: "x", previous_response_id: first.id }), 400, "previous_response_id");
  await expectError("previous_response_id of a response made with store false: 400", client.responses.create({
    model: "stories260K", input: "x", previous_response_id: whole.id }), 400, "previous_response_id");
  await expectError("store that is not a boolean: 400", client.responses.create({ model: "stories260K", input: "x",
    store: "yes" }), 400, "store");
  await expectError("a built-in tool: 400", client.responses.create({ model: "stories260K", input: "x",
    tools: [{ type: "web_search" }] }), 400, "tools[0]");
  await expectError("an image part: 400", client.responses.create({ model: "stories260K",
    input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }), 400, "input[0].content");
  await expectError("a format of an unknown type: 400", client.responses.create({ model: "stories260K", input: "x",
    text: { format: { type: "xml" } } }), 400, "response_format");

  // Function tools and a call round trip reach the template (a Qwen3 template renders them).
  const t = await startServer(["-c", "2048", "--chat-template", path.join(templates, "Qwen-Qwen3-0.6B.jinja")]);
  const tc = new OpenAI({ baseURL: t.base + "/v1", apiKey: "none", maxRetries: 0 });
  const tools = [{ type: "function", name: "get_weather", description: "Weather in a city",
                   parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const plain = await tc.responses.create({ model: "stories260K", input: "Once upon a time", max_output_tokens: 2, temperature: 0 });
  const withTools = await tc.responses.create({ model: "stories260K", input: "Once upon a time", tools, max_output_tokens: 2,
                                                temperature: 0 });
  const roundTrip = await tc.responses.create({ model: "stories260K", tools, max_output_tokens: 2, temperature: 0, input: [
    { role: "user", content: "Once upon a time" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: "{\"city\":\"Paris\"}" },
    { type: "function_call_output", call_id: "call_1", output: "sunny, 21 C" }] });
  check(withTools.usage.input_tokens > plain.usage.input_tokens + 20 && roundTrip.usage.input_tokens > withTools.usage.input_tokens + 10,
        "function tools, calls and their outputs reach the template",
        `${plain.usage.input_tokens} / ${withTools.usage.input_tokens} / ${roundTrip.usage.input_tokens}`);
  check(withTools.tools.length === 1 && withTools.tools[0].name === "get_weather", "the response lists its tools");
  // A forced call, then its output sent by previous_response_id: the same prompt as the whole conversation
  // (the call id the output item gave, and its arguments, are in the kept conversation).
  const call = await tc.responses.create({ model: "stories260K", input: "Once upon a time", tools, tool_choice: "required",
                                           max_output_tokens: 64, temperature: 0 });
  const fc = call.output.find((o) => o.type === "function_call");
  const answered = await tc.responses.create({ model: "stories260K", previous_response_id: call.id, tools, max_output_tokens: 2,
    temperature: 0, input: [{ type: "function_call_output", call_id: fc?.call_id, output: "sunny, 21 C" }] });
  const answeredWhole = await tc.responses.create({ model: "stories260K", tools, max_output_tokens: 2, temperature: 0, store: false,
    input: [{ role: "user", content: "Once upon a time" },
            { type: "function_call", call_id: fc?.call_id, name: fc?.name, arguments: fc?.arguments },
            { type: "function_call_output", call_id: fc?.call_id, output: "sunny, 21 C" }] });
  check(fc && answered.usage.input_tokens === answeredWhole.usage.input_tokens && answered.output_text === answeredWhole.output_text,
        "a function call's output continues its kept response", JSON.stringify([fc, answered.usage, answeredWhole.usage]));
} catch (e) {
  check(false, "responses client run", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
