// The web chat page in headless Chromium (Debian's chromium, driven by playwright-core): it shows the
// model's name, streams an answer (the text grows while it is generated), the Stop button ends it (the
// answer keeps its token count), a second message gets a complete answer with a tok/s figure, New chat
// starts an empty conversation, a failed request shows the server's error in place; conversations and
// settings survive a reload, the list switches between conversations, Regenerate and Edit resend,
// Copy copies, markdown tables, links and code blocks render, and Enter while an input method composes
// does not send; with several models, a list chooses the one requests name, kept across reloads. A
// screenshot of each state is saved and its path printed.
// Usage: node web_page.mjs ORACLE_DIR ZINC MODEL.gguf WORKDIR
import { mkdirSync, rmSync, symlinkSync } from "node:fs";
import { execFileSync } from "node:child_process";
import path from "node:path";
import { createRequire } from "node:module";
import { startServer } from "./start_server.mjs";

const [oracleDir, zinc, model, work] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const { chromium } = require("playwright-core");
mkdirSync(work, { recursive: true });
let failures = 0;
const check = (ok, what, detail = "") => {
  console.log(`${ok ? "ok" : "FAIL"} ${what}${ok || !detail ? "" : ": " + detail}`);
  if (!ok) failures++;
};
const executablePath = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => {
  try { require("node:fs").accessSync(p); return true; } catch { return false; }
});
if (!executablePath) {
  console.log("FAIL: chromium is not installed (scripts/deps.sh --test installs it)");
  process.exit(1);
}

let server = null, many = null;
let browser;
try {
  server = await startServer(zinc, model, ["-c", "2048"]);
  const port = server.port;
  browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--headless=new"] });
  const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: `http://127.0.0.1:${port}` });
  const page = await context.newPage();
  const shot = async (name) => {
    const file = path.resolve(work, `web_chat_${name}.png`);
    await page.screenshot({ path: file, fullPage: true });
    console.log(`screenshot: ${file}`);
  };
  const idle = () => page.waitForFunction(() => !document.getElementById("send").disabled, null, { timeout: 60000 });
  await page.goto(`http://127.0.0.1:${port}/`);
  await page.waitForFunction(() => document.getElementById("model").textContent === "stories260K", null, { timeout: 10000 });
  check(true, "the page names the model");

  // A long answer: watch it grow, then stop it.
  await page.fill("#input", "Once upon a time");
  await page.press("#input", "Enter");
  const lengths = new Set();
  for (let i = 0; i < 200 && lengths.size < 4; i++) {
    const n = await page.evaluate(() => (document.querySelector(".msg.assistant:last-child")?.textContent ?? "").length);
    if (n > 5) lengths.add(n);
    await page.waitForTimeout(15);
  }
  check(lengths.size >= 4, "the answer streams in", `lengths seen: ${[...lengths]}`);
  await page.click("#stop");
  await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child .stats")?.textContent.includes("stopped"),
                             null, { timeout: 10000 });
  check(await page.isEnabled("#send"), "Stop ends the answer and the form is ready again");
  const stoppedStats = await page.textContent(".msg.assistant:last-child .stats");
  check(/^\d+ tokens · [\d.]+ tok\/s · stopped$/.test(stoppedStats) && parseInt(stoppedStats) > 3,
        "a stopped answer keeps its token count and speed", stoppedStats);
  await shot("stopped");

  // New chat, then a short exchange that runs to its end.
  await page.click("#new");
  check((await page.$$(".msg")).length === 0, "New chat clears the conversation");
  await page.fill("#input", "Tell me about a **cat** and `code`");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.getElementById("speed").textContent.endsWith("tok/s"), null, { timeout: 60000 });
  const user = await page.innerHTML(".msg.user");
  check(user.includes("<strong>cat</strong>") && user.includes("<code>code</code>"), "markdown is rendered", user);
  const answer = await page.textContent(".msg.assistant");
  check(answer.trim().length > 20, "a complete answer", answer.slice(0, 80));
  // A request that fails (a message longer than the context): the server's message in the answer's
  // place, and the failed turn left out of the history, so the next message is answered.
  await page.click("#new");
  await page.fill("#input", "the cat sat on the mat ".repeat(600));
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelector(".msg.assistant .error") !== null, null, { timeout: 20000 });
  const failed = await page.textContent(".msg.assistant .error");
  check(failed.includes("context"), "a failed request shows the server's error in place", failed);
  await page.waitForFunction(() => !document.getElementById("send").disabled, null, { timeout: 10000 });
  await page.fill("#input", "Once upon a time");
  await page.press("#input", "Enter");
  await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 2 &&
                                   !document.getElementById("send").disabled, null, { timeout: 60000 });
  const after = await page.evaluate(() => {
    const last = document.querySelectorAll(".msg.assistant")[1];
    return { text: last.textContent, error: last.querySelector(".error") !== null };
  });
  check(!after.error && after.text.trim().length > 10, "the next message is answered (the failed turn is not resent)",
        JSON.stringify(after).slice(0, 200));
  await shot("error");

  // Three conversations so far; a reload keeps them, the open one and its messages.
  const before = await page.evaluate(() => ({
    list: [...document.querySelectorAll(".conv .title")].map((e) => e.textContent),
    messages: document.querySelectorAll(".msg").length,
  }));
  await page.reload();
  await page.waitForFunction(() => document.getElementById("model").textContent === "stories260K", null, { timeout: 10000 });
  const reloaded = await page.evaluate(() => ({
    list: [...document.querySelectorAll(".conv .title")].map((e) => e.textContent),
    messages: document.querySelectorAll(".msg").length,
    error: document.querySelector(".msg.assistant .error")?.textContent ?? "",
  }));
  check(before.list.length === 3 && JSON.stringify(reloaded.list) === JSON.stringify(before.list) &&
        reloaded.messages === before.messages && reloaded.error.includes("context"),
        "a reload keeps the conversations, the open one and its error", JSON.stringify({ before, reloaded }));
  await shot("reloaded");

  // The list switches: the conversation with the markdown question.
  await page.click(".conv:has-text('Tell me about')");
  const switched = await page.innerHTML(".msg.user");
  check(switched.includes("<strong>cat</strong>") && (await page.$$(".msg")).length === 2,
        "the list opens another conversation", switched);

  // Regenerate: the answer is replaced by a new one (still one question, one answer).
  const old = await page.textContent(".msg.assistant");
  await page.click(".msg.assistant .regenerate");
  await page.waitForFunction(() => document.querySelector(".msg.assistant .stats") !== null &&
                                   !document.getElementById("send").disabled, null, { timeout: 60000 });
  const regen = await page.evaluate(() => ({ users: document.querySelectorAll(".msg.user").length,
                                             answers: document.querySelectorAll(".msg.assistant").length }));
  check(regen.users === 1 && regen.answers === 1, "Regenerate answers the question again in place", JSON.stringify(regen));
  await shot("regenerated");

  // Copy puts the answer's text on the clipboard.
  await page.click(".msg.assistant .copy");
  const clip = await page.evaluate(() => navigator.clipboard.readText());
  const content = await page.evaluate(() => JSON.parse(localStorage.getItem("zinc-conversations"))
    .find((c) => c.id === localStorage.getItem("zinc-current")).messages[1].content);
  check(clip === content && clip.length > 10, "Copy copies the answer", clip.slice(0, 60));

  // Edit: the question comes back into the input, and sending it replaces the exchange.
  await page.click(".msg.user .edit");
  check((await page.inputValue("#input")).startsWith("Tell me about a **cat**") && (await page.$$(".msg")).length === 0,
        "Edit puts the question back to be changed", await page.inputValue("#input"));
  await page.fill("#input", "Once upon a time there was a dog");
  await page.press("#input", "Enter");
  await idle();
  const edited = await page.textContent(".msg.user");
  check(edited.includes("there was a dog") && (await page.$$(".msg")).length === 2, "the edited question is sent instead", edited);

  // Settings are sent and kept: a limit of 5 tokens gives a 5-token answer, and survives a reload.
  await page.click("#settings-toggle");
  await page.fill("#set-max-tokens", "5");
  await page.fill("#set-system", "You tell stories.");
  await shot("settings");
  await page.click("#new");
  await page.fill("#input", "Once upon a time");
  await page.press("#input", "Enter");
  await idle();
  const limited = await page.textContent(".msg.assistant .stats");
  check(limited.startsWith("5 tokens"), "the max-tokens setting is sent", limited);
  await page.reload();
  await page.waitForFunction(() => document.getElementById("model").textContent === "stories260K", null, { timeout: 10000 });
  check(await page.inputValue("#set-max-tokens") === "5" && await page.inputValue("#set-system") === "You tell stories.",
        "settings survive a reload");

  // Markdown: a table, a link, a code block with highlighting and its copy button.
  await page.click("#new");
  await page.fill("#input", "| a | b |\n|---|---|\n| 1 | **2** |\n\nsee [the docs](https://example.com/x)\n\n```js\nconst x = \"s\"; // note\n```");
  await page.click("#send");
  await idle();
  const md = await page.innerHTML(".msg.user");
  check(md.includes("<table>") && md.includes("<th>a</th>") && md.includes("<td><strong>2</strong></td>") &&
        md.includes('<a href="https://example.com/x" target="_blank" rel="noopener noreferrer">the docs</a>') &&
        md.includes('<span class="kw">const</span>') && md.includes('<span class="com">// note</span>'),
        "markdown tables, links and highlighted code", md);
  await page.click(".msg.user pre .copy-code");
  check(await page.evaluate(() => navigator.clipboard.readText()) === 'const x = "s"; // note', "a code block's Copy button");
  await shot("markdown");

  // Enter while an input method composes a character does not send.
  const count = (await page.$$(".msg")).length;
  await page.fill("#input", "にほん");
  await page.dispatchEvent("#input", "keydown", { key: "Enter", isComposing: true });
  await page.waitForTimeout(300);
  check((await page.$$(".msg")).length === count && (await page.inputValue("#input")) === "にほん",
        "Enter during input-method composition does not send");
  check(await page.evaluate(() => document.querySelector("link[rel=icon]") !== null), "the page has a favicon");

  // Several models (--models-dir): a list to choose from; the choice is what requests name, and it is kept.
  const dir = path.join(work, "models");
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  symlinkSync(path.resolve(model), path.join(dir, "stories.gguf"));
  execFileSync(zinc, ["quantize", model, path.join(dir, "stories-q8.gguf"), "Q8_0"], { stdio: "ignore" });
  many = await startServer(zinc, null, ["--models-dir", dir, "-c", "512", "--backend", "cpu"]);
  await page.goto(many.base + "/");
  await page.waitForFunction(() => !document.getElementById("model-select").hidden, null, { timeout: 10000 });
  const options = await page.$$eval("#model-select option", (os) => os.map((o) => o.value));
  check(options.length === 2 && options.includes("stories") && options.includes("stories-q8"), "several models: a list of them",
        JSON.stringify(options));
  await page.selectOption("#model-select", "stories-q8");
  await page.click("#new");
  await page.fill("#input", "Once upon a time");
  await page.press("#input", "Enter");
  await idle();
  const states = (await (await fetch(many.base + "/v1/models")).json()).data;
  check(states.find((m) => m.id === "stories-q8")?.status === "loaded" && states.find((m) => m.id === "stories")?.status === "available",
        "the chosen model answers (the server loaded it)", JSON.stringify(states.map((m) => [m.id, m.status])));
  await page.reload();
  await page.waitForFunction(() => !document.getElementById("model-select").hidden, null, { timeout: 10000 });
  check(await page.inputValue("#model-select") === "stories-q8", "the chosen model survives a reload");
  await shot("models");
} catch (e) {
  check(false, "web page run", e.stack || String(e));
} finally {
  if (browser) await browser.close();
  if (server) server.proc.kill("SIGTERM");
  if (many) many.proc.kill("SIGTERM");
}
process.exit(failures ? 1 : 0);
