// Output constrained by the request, through the official clients over loopback: response_format
// json_object and json_schema, llama.cpp's grammar and json_schema fields, forced tool calls in the
// OpenAI, Anthropic and Responses APIs (streamed and not), and the errors of what cannot be enforced.
// stories260K writes stories, never JSON or tool calls by itself: every answer below that parses, keeps
// the schema's property order and types, or is a well-formed call, does so because of the constraint.
// GPT-OSS's Harmony calls run on a copy of stories260K whose vocabulary has Harmony's control tokens
// (zinc_make_variant ... harmony), served with GPT-OSS's template.
// Usage: node structured_output.mjs ORACLE_DIR ZINC STORIES.gguf TEMPLATES_DIR MAKE_VARIANT WORK_DIR
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, templates, makeVariant, workDir] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const Anthropic = require("@anthropic-ai/sdk").default ?? require("@anthropic-ai/sdk");
const { check, start, stopAll, failures } = testRun(zinc, model);

const parses = (text) => {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, error: String(e) };
  }
};

try {
  const s = await start(["-c", "2048", "--chat-template", path.join(templates, "Qwen-Qwen3-0.6B.jinja")]);
  const openai = new OpenAI({ baseURL: s.base + "/v1", apiKey: "none", maxRetries: 0 });
  const messages = [{ role: "user", content: "Once upon a time" }];
  const base = { model: "stories260K", temperature: 0, max_tokens: 200, messages };

  // json_object: a JSON object, and generation ends where the object does.
  const obj = await openai.chat.completions.create({ ...base, response_format: { type: "json_object" } });
  const o = parses(obj.choices[0].message.content);
  check(o.ok && typeof o.value === "object" && !Array.isArray(o.value) && obj.choices[0].finish_reason === "stop",
        "response_format json_object: a JSON object", JSON.stringify(obj.choices[0]));

  // json_schema: the properties in the schema's order with their types; the same text streamed.
  const schema = { type: "object", properties: { title: { type: "string", maxLength: 40 }, pages: { type: "integer" },
                                                 mood: { enum: ["happy", "sad"] }, tags: { type: "array", items: { type: "string" }, maxItems: 2 } },
                   required: ["title", "pages", "mood", "tags"], additionalProperties: false };
  const rf = { type: "json_schema", json_schema: { name: "story", strict: true, schema } };
  const js = await openai.chat.completions.create({ ...base, response_format: rf });
  const v = parses(js.choices[0].message.content);
  check(v.ok && JSON.stringify(Object.keys(v.value)) === '["title","pages","mood","tags"]' && typeof v.value.title === "string" &&
        v.value.title.length <= 40 && Number.isInteger(v.value.pages) && ["happy", "sad"].includes(v.value.mood) &&
        Array.isArray(v.value.tags) && v.value.tags.length <= 2,
        "response_format json_schema: the schema's properties, in order, of their types", js.choices[0].message.content);
  let streamed = "";
  for await (const c of await openai.chat.completions.create({ ...base, response_format: rf, stream: true })) {
    streamed += c.choices[0]?.delta?.content ?? "";
  }
  check(streamed === js.choices[0].message.content, "the same JSON streamed", streamed);
  const llamaField = await openai.chat.completions.create({ ...base, json_schema: schema });
  check(llamaField.choices[0].message.content === js.choices[0].message.content, "llama.cpp's json_schema field does the same");

  // A GBNF grammar on the completions endpoint.
  const done = await openai.completions.create({ model: "stories260K", prompt: "Once upon a time", temperature: 0, max_tokens: 40,
                                                grammar: 'root ::= " there was a " [a-z]+ " named " [A-Z] [a-z]+ "."' });
  check(/^ there was a [a-z]+ named [A-Z][a-z]+\.$/.test(done.choices[0].text) && done.choices[0].finish_reason === "stop",
        "grammar on /v1/completions", JSON.stringify(done.choices[0].text));

  // Forced tool calls.
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather in a city",
                   parameters: { type: "object", properties: { city: { type: "string", maxLength: 24 }, days: { type: "integer" } }, required: ["city"] } } },
                 { type: "function", function: { name: "get_time", description: "The time in a zone", parameters: { type: "object", properties: { zone: { type: "string", maxLength: 24 } }, required: ["zone"] } } }];
  const named = await openai.chat.completions.create({ ...base, tools, tool_choice: { type: "function", function: { name: "get_time" } } });
  const call = named.choices[0].message.tool_calls?.[0];
  const args = parses(call?.function?.arguments ?? "");
  check(named.choices[0].finish_reason === "tool_calls" && named.choices[0].message.tool_calls.length === 1 &&
        call.function.name === "get_time" && args.ok && typeof args.value.zone === "string" && !named.choices[0].message.content,
        "tool_choice naming a function: one call of it with arguments of its schema", JSON.stringify(named.choices[0].message));
  const one = await openai.chat.completions.create({ ...base, tools, tool_choice: "required", parallel_tool_calls: false });
  const c1 = one.choices[0].message.tool_calls ?? [];
  check(one.choices[0].finish_reason === "tool_calls" && c1.length === 1 && ["get_weather", "get_time"].includes(c1[0].function.name) &&
        parses(c1[0].function.arguments).ok, "tool_choice required: a call of one of the tools", JSON.stringify(one.choices[0].message));
  const deltas = [];
  let streamedContent = "";
  for await (const c of await openai.chat.completions.create({ ...base, tools, tool_choice: { type: "function", function: { name: "get_time" } },
                                                               stream: true })) {
    const d = c.choices[0]?.delta ?? {};
    streamedContent += d.content ?? "";
    for (const t of d.tool_calls ?? []) deltas.push(t);
  }
  const streamedArgs = deltas.map((t) => t.function?.arguments ?? "").join("");
  check(deltas.length > 0 && deltas[0].function.name === "get_time" && streamedArgs === call.function.arguments && !streamedContent.includes("<tool_call>"),
        "the forced call streamed: the same call, no markup in the content", JSON.stringify({ deltas, streamedContent }));

  // Anthropic: tool_choice tool and any.
  const anthropic = new Anthropic({ baseURL: s.base, apiKey: "none", maxRetries: 0 });
  const aTools = tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters }));
  const forced = await anthropic.messages.create({ model: "stories260K", max_tokens: 200, temperature: 0, messages, tools: aTools,
                                                   tool_choice: { type: "tool", name: "get_weather" } });
  const use = forced.content.find((b) => b.type === "tool_use");
  check(forced.stop_reason === "tool_use" && use?.name === "get_weather" && typeof use.input.city === "string",
        "Anthropic tool_choice tool: a tool_use block of its schema", JSON.stringify(forced.content));
  const anyTool = await anthropic.messages.create({ model: "stories260K", max_tokens: 200, temperature: 0, messages, tools: aTools,
                                                    tool_choice: { type: "any" } });
  check(anyTool.stop_reason === "tool_use" && anyTool.content.some((b) => b.type === "tool_use"), "Anthropic tool_choice any",
        JSON.stringify(anyTool.content));

  // Responses: text.format json_schema, and a forced function call.
  const rs = await openai.responses.create({ model: "stories260K", input: "Once upon a time", temperature: 0, max_output_tokens: 200,
                                             text: { format: { type: "json_schema", name: "story", schema, strict: true } } });
  const rv = parses(rs.output_text);
  check(rv.ok && JSON.stringify(Object.keys(rv.value)) === '["title","pages","mood","tags"]', "Responses text.format json_schema",
        rs.output_text);
  const rt = await openai.responses.create({ model: "stories260K", input: "Once upon a time", temperature: 0, max_output_tokens: 200,
    tools: [{ type: "function", name: "get_time", parameters: tools[1].function.parameters }], tool_choice: "required" });
  const fc = rt.output.find((i) => i.type === "function_call");
  check(fc?.name === "get_time" && parses(fc.arguments).ok, "Responses tool_choice required: a function_call item", JSON.stringify(rt.output));

  // Harmony: the forced call is a message to functions.NAME whose header the control tokens make; the
  // model may reason in the analysis channel first (unconstrained, here within a budget: the engine's
  // conclusion ends the analysis message and the grammar writes the call's header), sampled or greedy.
  mkdirSync(workDir, { recursive: true });
  const harmonyModel = path.join(workDir, "stories260K-harmony.gguf");
  execFileSync(makeVariant, [model, harmonyModel, "harmony"]);
  const hs = await start(["-c", "2048", "--chat-template", path.join(templates, "openai-gpt-oss-120b.jinja")], harmonyModel);
  const ho = new OpenAI({ baseURL: hs.base + "/v1", apiKey: "none", maxRetries: 0 });
  const harmonyRuns = [[{ type: "function", function: { name: "get_weather" } }, { temperature: 0 }],
                       ["required", { temperature: 0 }], ["required", { temperature: 1.0, seed: 1 }], ["required", { temperature: 1.0, seed: 2 }],
                       ["required", { temperature: 1.0, seed: 3 }]];
  let reasoned = 0;
  for (const [choice, sampling] of harmonyRuns) {
    const r = await ho.chat.completions.create({ ...base, ...sampling, tools, tool_choice: choice, thinking_budget_tokens: 24 });
    const m = r.choices[0].message;
    const tc = m.tool_calls ?? [];
    const a = parses(tc[0]?.function?.arguments ?? "");
    const ok = tc[0]?.function?.name === "get_weather" ? typeof a.value?.city === "string" : typeof a.value?.zone === "string";
    check(r.choices[0].finish_reason === "tool_calls" && tc.length === 1 && a.ok && ok &&
          (choice === "required" || tc[0].function.name === "get_weather") && !m.content && !(m.reasoning_content ?? "").includes("<|"),
          `Harmony tool_choice ${JSON.stringify(choice)} ${JSON.stringify(sampling)}: one call of the tool's schema`, JSON.stringify(m));
    if (m.reasoning_content) ++reasoned;
  }
  check(reasoned > 0, "Harmony: some of those calls came after reasoning", String(reasoned));
  const hDeltas = [];
  let hContent = "";
  for await (const c of await ho.chat.completions.create({ ...base, tools, tool_choice: { type: "function", function: { name: "get_time" } },
                                                           stream: true })) {
    hContent += c.choices[0]?.delta?.content ?? "";
    for (const t of c.choices[0]?.delta?.tool_calls ?? []) hDeltas.push(t);
  }
  const hArgs = parses(hDeltas.map((t) => t.function?.arguments ?? "").join(""));
  check(hDeltas[0]?.function?.name === "get_time" && hArgs.ok && typeof hArgs.value.zone === "string" && !hContent.includes("<|"),
        "Harmony: the forced call streamed, no markup in the content", JSON.stringify({ hDeltas, hContent }));
  const ha = await new Anthropic({ baseURL: hs.base, apiKey: "none", maxRetries: 0 }).messages.create({
    model: "stories260K", max_tokens: 200, temperature: 0, messages, tools: tools.map((t) => ({ name: t.function.name, description: t.function.description, input_schema: t.function.parameters })),
    tool_choice: { type: "tool", name: "get_time" } });
  const hUse = ha.content.find((b) => b.type === "tool_use");
  check(ha.stop_reason === "tool_use" && hUse?.name === "get_time" && typeof hUse.input.zone === "string",
        "Harmony: Anthropic tool_choice tool", JSON.stringify(ha.content));

  // A response format on Harmony: the model may reason first (the analysis message, free, within a
  // budget), then its answer in the final channel follows the schema.
  const small = { type: "json_schema", json_schema: { name: "s", strict: true, schema: { type: "object",
    properties: { title: { type: "string", maxLength: 16 }, pages: { type: "integer" } }, required: ["title", "pages"], additionalProperties: false } } };
  let answeredAfterReasoning = 0;
  for (const sampling of [{ temperature: 0 }, { temperature: 1.0, seed: 1 }, { temperature: 1.0, seed: 2 }, { temperature: 1.0, seed: 3 },
                          { temperature: 1.0, seed: 4 }]) {
    const r = await ho.chat.completions.create({ ...base, ...sampling, response_format: small, thinking_budget_tokens: 24 });
    const m = r.choices[0].message;
    const v = parses(m.content ?? "");
    // The header markers are tokens a JSON string never takes (they render as text: "<|channel|>").
    check(v.ok && JSON.stringify(Object.keys(v.value)) === '["title","pages"]' && Number.isInteger(v.value.pages) &&
          r.choices[0].finish_reason === "stop" && !m.content.includes("<|"),
          `Harmony response_format ${JSON.stringify(sampling)}: the final channel's answer in the schema`, JSON.stringify(m));
    if (m.reasoning_content && v.ok) ++answeredAfterReasoning;
  }
  check(answeredAfterReasoning > 0, "Harmony: some of those answers came after reasoning", String(answeredAfterReasoning));
  // Even a model pushed toward <|channel|> at every step writes it only as a header.
  const channel = (await (await fetch(hs.base + "/tokenize", { method: "POST", body: JSON.stringify({ content: "<|channel|>" }) })).json()).tokens;
  const pushed = await ho.chat.completions.create({ ...base, temperature: 1.0, seed: 1, response_format: small, thinking_budget_tokens: 24,
                                                   logit_bias: { [channel[0]]: 100 } });
  const pm = pushed.choices[0].message;
  check(channel.length === 1 && parses(pm.content ?? "").ok && !pm.content.includes("<|"), "Harmony: a header marker never inside the answer's strings",
        JSON.stringify({ channel, pm }));

  // What cannot be enforced is a 400 naming the field.
  const status = async (p) => {
    try {
      await p;
      return "accepted";
    } catch (e) {
      return `${e.status} ${e.error?.param ?? e.error?.error?.param ?? ""}`;
    }
  };
  check(await status(openai.chat.completions.create({ ...base, grammar: "root ::= undefined-rule" })) === "400 grammar", "a bad grammar: 400");
  check(await status(openai.chat.completions.create({ ...base, response_format: { type: "json_schema", json_schema: { name: "x",
    schema: { type: "string", pattern: "^a$" } } } })) === "400 response_format.json_schema.schema", "a pattern: 400");
  const plain = await start(["-c", "512"]);  // ChatML: no tool-call format to constrain
  const p = new OpenAI({ baseURL: plain.base + "/v1", apiKey: "none", maxRetries: 0 });
  check(await status(p.chat.completions.create({ ...base, tools, tool_choice: "required" })) === "400 tool_choice",
        "forcing a call with no tool-call format: 400");

  // zinc serve --grammar: the grammar of requests that give none; a bad one stops the server at start.
  const g = await start(["-c", "512", "--grammar", 'root ::= " there was a " ( "cat" | "dog" ) "."']);
  const gc = new OpenAI({ baseURL: g.base + "/v1", apiKey: "none", maxRetries: 0 });
  const d = await gc.completions.create({ model: "stories260K", prompt: "Once upon a time", temperature: 0, max_tokens: 20 });
  const own = await gc.completions.create({ model: "stories260K", prompt: "Once upon a time", temperature: 0, max_tokens: 20,
                                            grammar: 'root ::= " there was a " [a-z]+' });
  check(/^ there was a (cat|dog)\.$/.test(d.choices[0].text) && /^ there was a [a-z]+$/.test(own.choices[0].text),
        "serve --grammar constrains requests that give no grammar of their own", JSON.stringify([d.choices[0].text, own.choices[0].text]));
  let refused = "";
  try {
    await start(["-c", "512", "--grammar", "root ::= undefined-rule"]);
  } catch (e) {
    refused = String(e);
  }
  check(refused.includes("never defined"), "serve --grammar with a bad grammar stops with the reason", refused);
} catch (e) {
  check(false, "structured output run", e.stack || String(e));
} finally {
  stopAll();
}
process.exit(failures() ? 1 : 0);
