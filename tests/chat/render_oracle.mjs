// Renders every (template x conversation) pair with @huggingface/jinja, the independent reference
// renderer, and writes the results as JSON for ZINC's comparison (chat_oracle_compare.cpp).
//
// Usage: node render_oracle.mjs TEMPLATES_DIR CONVERSATIONS.json CASES.json OUT.json
//
// CASES.json holds small templates that each exercise one construct, rendered with their own context.
// The template context is built from each conversation by the rule ZINC's ChatTemplate uses:
// messages, tools (null when the conversation has none), add_generation_prompt, bos_token, eos_token,
// enable_thinking (only when the conversation sets it), then the conversation's "extra" variables.
// strftime_now() sees the fixed time "now" in UTC (run with TZ=UTC).
import fs from "node:fs";
import path from "node:path";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const oracleDir = path.resolve(path.dirname(new URL(import.meta.url).pathname), "../oracle");
const { Template } = require(path.join(oracleDir, "node_modules/@huggingface/jinja/dist/index.cjs"));
const version = JSON.parse(
  fs.readFileSync(path.join(oracleDir, "node_modules/@huggingface/jinja/package.json"), "utf8"),
).version;

const [templatesDir, conversationsPath, casesPath, outPath] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node render_oracle.mjs TEMPLATES_DIR CONVERSATIONS.json CASES.json OUT.json");
  process.exit(2);
}
const suite = JSON.parse(fs.readFileSync(conversationsPath, "utf8"));
const cases = JSON.parse(fs.readFileSync(casesPath, "utf8"));
if (cases.now !== suite.now) throw new Error("CASES.json and CONVERSATIONS.json must pin the same time");

// Pin the clock: `new Date()` with no arguments returns the suite's fixed time.
const fixed = Date.parse(suite.now);
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) {
    super(...(args.length ? args : [fixed]));
  }
  static now() {
    return fixed;
  }
};

function context(conv) {
  const ctx = {
    messages: conv.messages,
    tools: conv.tools ?? null,
    add_generation_prompt: conv.add_generation_prompt,
    bos_token: suite.bos_token,
    eos_token: suite.eos_token,
  };
  if (conv.enable_thinking !== undefined) ctx.enable_thinking = conv.enable_thinking;
  Object.assign(ctx, conv.extra ?? {});
  // Each render gets its own copy, as a template may change what it is given.
  return JSON.parse(JSON.stringify(ctx));
}

const results = {};
const files = fs.readdirSync(templatesDir).filter((f) => f.endsWith(".jinja")).sort();
for (const file of files) {
  const source = fs.readFileSync(path.join(templatesDir, file), "utf8");
  const perConv = {};
  let template = null;
  let parseError = null;
  try {
    template = new Template(source);
  } catch (e) {
    parseError = String(e?.message ?? e);
  }
  for (const conv of suite.conversations) {
    if (!template) {
      perConv[conv.name] = { ok: false, error: `parse: ${parseError}` };
      continue;
    }
    try {
      perConv[conv.name] = { ok: true, output: template.render(context(conv)) };
    } catch (e) {
      perConv[conv.name] = { ok: false, error: String(e?.message ?? e) };
    }
  }
  results[file] = perConv;
}
function renderCase(c) {
  try {
    return { ok: true, output: new Template(c.template).render(JSON.parse(JSON.stringify(c.context ?? {}))) };
  } catch (e) {
    return { ok: false, error: String(e?.message ?? e) };
  }
}
const caseResults = {};
for (const c of cases.cases) caseResults[c.name] = renderCase(c);

fs.writeFileSync(
  outPath,
  JSON.stringify({ renderer: `@huggingface/jinja ${version}`, templates: results, cases: caseResults }, null, 1),
);
console.log(
  `rendered ${files.length} templates x ${suite.conversations.length} conversations and ${cases.cases.length} cases ` +
    `with @huggingface/jinja ${version}`,
);
