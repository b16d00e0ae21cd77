// zinc serve's Anthropic Messages API driven by the official Anthropic client (npm "@anthropic-ai/sdk",
// pinned in tests/oracle) over loopback: a message, the same answer streamed with the events in
// Anthropic's order, stop sequences, count_tokens, system prompts, content blocks, tools and tool results
// reaching the template, thinking settings, x-api-key, and errors in Anthropic's shape. stories260K with
// greedy sampling makes answers deterministic; the OpenAI endpoint on the same server is the oracle for
// the text (the same engine and template through another API).
// Usage: node anthropic_client.mjs ORACLE_DIR ZINC STORIES.gguf TEMPLATES_DIR
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, templates] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");
const OpenAI = require("openai").default ?? require("openai");
const { check, start: startServer, stopAll, failures } = testRun(zinc, model);

async function expectError(what, promise, status, type) {
  try {
    await promise;
    check(false, what, "no error");
  } catch (e) {
    const ok = e.status === status && e.error?.type === "error" && e.error?.error?.type === type;
    check(ok, what, `status ${e.status}: ${JSON.stringify(e.error)}`);
  }
}

try {
  const s = await startServer(["-c", "512", "--parallel", "2"]);
  const client = new Anthropic({ baseURL: s.base, apiKey: "none", maxRetries: 0 });
  const openai = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const messages = [{ role: "user", content: "Once upon a time" }];

  // A message: the text the OpenAI endpoint gives for the same conversation.
  const msg = await client.messages.create({ model: "stories260K", max_tokens: 24, temperature: 0, messages });
  const oai = await openai.chat.completions.create({ model: "stories260K", max_tokens: 24, temperature: 0, messages });
  check(msg.type === "message" && msg.role === "assistant" && msg.id.startsWith("msg_") && msg.model === "stories260K",
        "a message object", JSON.stringify(msg).slice(0, 200));
  check(msg.content.length === 1 && msg.content[0].type === "text" && msg.content[0].text === oai.choices[0].message.content,
        "its text is the OpenAI endpoint's for the same conversation", JSON.stringify(msg.content));
  check(msg.stop_reason === "max_tokens" && msg.stop_sequence === null && msg.usage.output_tokens === 24 &&
        msg.usage.input_tokens === oai.usage.prompt_tokens, "stop reason and usage", JSON.stringify(msg.usage));
  const counted = await client.messages.countTokens({ model: "stories260K", messages });
  check(counted.input_tokens === msg.usage.input_tokens, "count_tokens counts the prompt", JSON.stringify(counted));

  // Streamed: the events in Anthropic's order and the same text.
  const events = [];
  const stream = client.messages.stream({ model: "stories260K", max_tokens: 24, temperature: 0, messages });
  for await (const e of stream) events.push(e.type);
  const final = await stream.finalMessage();
  const order = events.filter((t, i) => t !== events[i - 1]).join(",");
  check(order === "message_start,content_block_start,content_block_delta,content_block_stop,message_delta,message_stop",
        "the stream's events come in Anthropic's order", order);
  check(final.content[0].text === msg.content[0].text && final.stop_reason === "max_tokens" && final.usage.output_tokens === 24,
        "the streamed message equals the whole one", JSON.stringify(final).slice(0, 200));

  // A stop sequence from inside the answer ends it there.
  const text = msg.content[0].text;
  const cut = text.slice(8, 12);
  const stopped = await client.messages.create({ model: "stories260K", max_tokens: 24, temperature: 0, messages,
                                                 stop_sequences: ["zzzz", cut] });
  const oaiStopped = await openai.chat.completions.create({ model: "stories260K", max_tokens: 24, temperature: 0, messages,
                                                          stop: ["zzzz", cut] });
  check(stopped.stop_reason === "stop_sequence" && stopped.stop_sequence === cut &&
        stopped.content[0].text === oaiStopped.choices[0].message.content && stopped.content[0].text.length < text.indexOf(cut) + 1,
        "stop_sequences end the answer and are named", JSON.stringify(stopped).slice(0, 300));

  // Content blocks and a system prompt reach the template (the prompt grows by their tokens).
  const blocks = await client.messages.countTokens({ model: "stories260K", system: [{ type: "text", text: "Be kind." }],
    messages: [{ role: "user", content: [{ type: "text", text: "Once upon" }, { type: "text", text: "a time" }] }] });
  check(blocks.input_tokens > counted.input_tokens, "a system prompt and text blocks reach the template",
        `${blocks.input_tokens} vs ${counted.input_tokens}`);
  const thinking = await client.messages.create({ model: "stories260K", max_tokens: 4, temperature: 0, messages,
                                                  thinking: { type: "enabled", budget_tokens: 1024 } });
  const noThinking = await client.messages.create({ model: "stories260K", max_tokens: 4, temperature: 0, messages,
                                                    thinking: { type: "disabled" } });
  check(thinking.usage.output_tokens === 4 && noThinking.usage.output_tokens === 4, "thinking enabled and disabled are accepted");

  // Errors in Anthropic's shape.
  await expectError("no max_tokens: 400 invalid_request_error",
                    client.messages.create({ model: "stories260K", messages }), 400, "invalid_request_error");
  await expectError("an image block: 400", client.messages.create({ model: "stories260K", max_tokens: 4, messages: [
    { role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "AAAA" } }] }] }),
                    400, "invalid_request_error");
  await expectError("forcing a tool where the template has no tool-call format: 400", client.messages.create({ model: "stories260K", max_tokens: 4,
    messages, tools: [{ name: "f", input_schema: { type: "object" } }], tool_choice: { type: "any" } }), 400, "invalid_request_error");
  await expectError("a prompt past the context: 400", client.messages.create({ model: "stories260K", max_tokens: 4,
    messages: [{ role: "user", content: "the cat sat on the mat ".repeat(200) }] }), 400, "invalid_request_error");

  // Tools and a tool round trip reach the template (a Qwen3 template renders them).
  const t = await startServer(["-c", "2048", "--chat-template", path.join(templates, "Qwen-Qwen3-0.6B.jinja"),
                               "--api-key", "sekret"]);
  const tc = new Anthropic({ baseURL: t.base, apiKey: "sekret", maxRetries: 0 });
  const tools = [{ name: "get_weather", description: "Weather in a city",
                   input_schema: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } }];
  const plain = await tc.messages.countTokens({ model: "stories260K", messages });
  const withTools = await tc.messages.countTokens({ model: "stories260K", messages, tools });
  const roundTrip = await tc.messages.countTokens({ model: "stories260K", tools, messages: [
    ...messages,
    { role: "assistant", content: [{ type: "text", text: "Let me look." },
                                   { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny, 21 C" }] }] });
  check(withTools.input_tokens > plain.input_tokens + 20 && roundTrip.input_tokens > withTools.input_tokens + 10,
        "tools, tool_use and tool_result blocks reach the template",
        `${plain.input_tokens} / ${withTools.input_tokens} / ${roundTrip.input_tokens}`);
  const answered = await tc.messages.create({ model: "stories260K", max_tokens: 4, temperature: 0, tools, messages });
  check(answered.usage.output_tokens === 4, "x-api-key authenticates");
  await expectError("a wrong key: 401 authentication_error",
                    new Anthropic({ baseURL: t.base, apiKey: "wrong", maxRetries: 0 }).messages.create(
                      { model: "stories260K", max_tokens: 4, messages }), 401, "authentication_error");

  // A thinking budget, on a template that opens the reasoning block (Qwen3.5's): stories260K never
  // closes it by itself, so without a budget the whole answer is reasoning; with one, after the budget
  // the engine writes the closing sentence and </think>, and the model goes on into the answer.
  const q = await startServer(["-c", "1024", "--chat-template", path.join(templates, "Qwen3.5-4B.jinja")]);
  const qc = new Anthropic({ baseURL: q.base, apiKey: "none", maxRetries: 0 });
  const qo = new OpenAI({ baseURL: q.base + "/v1", apiKey: "none", maxRetries: 0 });
  const sentence = "Considering the limited time by the user, I have to give the solution based on the thinking directly now.";
  const unlimited = await qc.messages.create({ model: "stories260K", max_tokens: 160, temperature: 0, messages,
                                               thinking: { type: "enabled", budget_tokens: 100000 } });
  const freeThought = unlimited.content.find((b) => b.type === "thinking")?.thinking ?? "";
  check(unlimited.content.length === 1 && freeThought.length > 100 && !freeThought.includes(sentence),
        "without a budget it only thinks", JSON.stringify(unlimited.content).slice(0, 300));
  const budgeted = await qc.messages.create({ model: "stories260K", max_tokens: 160, temperature: 0, messages,
                                              thinking: { type: "enabled", budget_tokens: 8 } });
  const thought = budgeted.content[0]?.type === "thinking" ? budgeted.content[0].thinking : "";
  const answer = budgeted.content[1]?.type === "text" ? budgeted.content[1].text : "";
  const own = thought.endsWith(sentence) ? thought.slice(0, -sentence.length).trim() : null;
  check(own !== null && own.length > 0 && freeThought.startsWith(own) && answer.length > 0 && budgeted.content.length === 2 &&
        budgeted.usage.output_tokens === 160,
        "a budget of 8 tokens: the model's own reasoning, the closing sentence, then an answer",
        JSON.stringify(budgeted.content).slice(0, 600));
  const streamedBudget = qc.messages.stream({ model: "stories260K", max_tokens: 160, temperature: 0, messages,
                                             thinking: { type: "enabled", budget_tokens: 8 } });
  const deltas = [];
  for await (const e of streamedBudget) if (e.type === "content_block_delta") deltas.push(e.delta.type);
  const streamedFinal = await streamedBudget.finalMessage();
  check(JSON.stringify(streamedFinal.content) === JSON.stringify(budgeted.content) &&
        deltas.filter((t, i) => t !== deltas[i - 1]).join(",") === "thinking_delta,signature_delta,text_delta",
        "streamed: thinking deltas, then text deltas, the same blocks", JSON.stringify(streamedFinal.content).slice(0, 300));
  // The OpenAI endpoint's thinking_budget_tokens does the same, and usage counts the reasoning tokens.
  const oaiBudget = await qo.chat.completions.create({ model: "stories260K", max_tokens: 160, temperature: 0, messages,
                                                       thinking_budget_tokens: 8 });
  const om = oaiBudget.choices[0].message;
  const reasoningTokens = oaiBudget.usage.completion_tokens_details?.reasoning_tokens;
  check(om.reasoning_content === thought && om.content === answer && reasoningTokens > 8 && reasoningTokens < 160,
        "thinking_budget_tokens on the OpenAI endpoint: the same answer, its reasoning tokens counted",
        JSON.stringify(oaiBudget.usage));
  // reasoning_effort for a template that does not read it: minimal turns thinking off (the template
  // closes the block in the prompt), high leaves it unlimited.
  const minimal = await qo.chat.completions.create({ model: "stories260K", max_tokens: 16, temperature: 0, messages,
                                                     reasoning_effort: "minimal" });
  const high = await qo.chat.completions.create({ model: "stories260K", max_tokens: 16, temperature: 0, messages,
                                                  reasoning_effort: "high" });
  check(!minimal.choices[0].message.reasoning_content && minimal.usage.completion_tokens_details.reasoning_tokens === 0 &&
        high.choices[0].message.reasoning_content && high.usage.completion_tokens_details.reasoning_tokens === 16,
        "reasoning_effort minimal: no reasoning; high: all of it", JSON.stringify([minimal.usage, high.usage]));
  await expectError("a negative budget_tokens: 400", qc.messages.create({ model: "stories260K", max_tokens: 4, messages,
    thinking: { type: "enabled", budget_tokens: -5 } }), 400, "invalid_request_error");
} catch (e) {
  check(false, "anthropic client run", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
