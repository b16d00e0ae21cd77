// The web chat page in headless Chromium (Debian's chromium, driven by playwright-core): it shows the
// model's name, streams an answer (the text grows while it is generated), the Stop button ends it,
// a second message gets a complete answer with a tok/s figure, New chat clears the page. A screenshot
// is saved and its path printed.
// Usage: node web_page.mjs ORACLE_DIR ZINC MODEL.gguf WORKDIR
import { mkdirSync } from "node:fs";
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

let server = null;
let browser;
try {
  server = await startServer(zinc, model, ["-c", "2048"]);
  const port = server.port;
  browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--headless=new"] });
  const page = await browser.newPage({ viewport: { width: 900, height: 700 } });
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
  await page.waitForFunction(() => document.querySelector(".msg.assistant:last-child")?.textContent.includes("[stopped]"),
                             null, { timeout: 10000 });
  check(await page.isEnabled("#send"), "Stop ends the answer and the form is ready again");

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
  const errShot = path.resolve(work, "web_chat_error.png");
  await page.screenshot({ path: errShot, fullPage: true });
  console.log(`screenshot: ${errShot}`);

  const shot = path.resolve(work, "web_chat.png");
  await page.screenshot({ path: shot, fullPage: true });
  console.log(`screenshot: ${shot}`);
} catch (e) {
  check(false, "web page run", e.stack || String(e));
} finally {
  if (browser) await browser.close();
  if (server) server.proc.kill("SIGTERM");
}
process.exit(failures ? 1 : 0);
