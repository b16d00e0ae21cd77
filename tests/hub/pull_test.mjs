// zinc pull / list / rm against a hub on loopback (started here): Hugging Face-style redirects with
// the published SHA-256 (computed here, independently), Range requests, a dropped connection, a
// stall, a wrong digest, a 404, a file that is not GGUF, a gated file needing HF_TOKEN (which must not
// reach the CDN), a server that ignores Range, a file too large for the disk, a size header that is not a
// number, a file past the size cap, a body without a length that never ends (cut off at --max-size), and
// two URLs whose files share a name (two models). Every failure must leave
// no model behind and say why; an interrupted pull resumes from its partial size.
// Usage: node pull_test.mjs ZINC MODEL.gguf WORKDIR
import http from "node:http";
import crypto from "node:crypto";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const [zinc, modelFile, work] = process.argv.slice(2);
fs.rmSync(work, { recursive: true, force: true });
fs.mkdirSync(work, { recursive: true });
const body = fs.readFileSync(modelFile);
const sha = crypto.createHash("sha256").update(body).digest("hex");
const notGguf = Buffer.from("hello, this is not a model file\n".repeat(100));
const notGgufSha = crypto.createHash("sha256").update(notGguf).digest("hex");
const seen = { ranges: [], cdnAuth: 0, firstGet: {} };

function serveBytes(req, res, data, { ignoreRange = false } = {}) {
  const m = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range || "");
  if (m && !ignoreRange) {
    const start = Number(m[1]), end = m[2] ? Math.min(Number(m[2]), data.length - 1) : data.length - 1;
    if (start >= data.length) { res.writeHead(416); res.end(); return; }
    res.writeHead(206, { "Content-Length": end - start + 1, "Content-Range": `bytes ${start}-${end}/${data.length}` });
    if (req.method === "HEAD") return res.end();
    res.end(data.subarray(start, end + 1));
    return;
  }
  res.writeHead(200, { "Content-Length": data.length, "Accept-Ranges": "bytes", ETag: '"not-a-sha-etag"' });
  if (req.method === "HEAD") return res.end();
  res.end(data);
}

const server = http.createServer((req, res) => {
  const url = req.url;
  if (url.startsWith("/cdn/")) {
    if (req.headers.authorization) seen.cdnAuth++;
    if (req.headers.range) seen.ranges.push(`${url} ${req.headers.range}`);
    const name = url.split("/")[2];
    const first = req.method === "GET" && !seen.firstGet[name];
    if (req.method === "GET") seen.firstGet[name] = true;
    // pdrop2's ranges die only during the first pull: whether a range had started when another's
    // failure ended that pull depends on timing, so the resumed pull must not depend on it.
    if ((name === "pdrop" || (name === "pdrop2" && !seen.pdrop2Healed)) && req.method === "GET") {
      // Every range's first request dies half way (a range is known by its end: a retry asks for
      // the rest of it).
      const m = /^bytes=(\d+)-(\d+)$/.exec(req.headers.range || "");
      const key = name + (m ? m[2] : "");
      if (!seen.firstGet[key]) {
        seen.firstGet[key] = true;
        if (m) {
          const a = Number(m[1]), b = Number(m[2]);
          res.writeHead(206, { "Content-Length": b - a + 1, "Content-Range": `bytes ${a}-${b}/${body.length}` });
          res.write(body.subarray(a, a + ((b - a + 1) >> 1)), () => setTimeout(() => res.destroy(), 50));
          return;
        }
      }
    }
    if ((name === "drop" || name === "norange" || name === "partial") && first) {
      // Half the file, then the connection dies.
      res.writeHead(200, { "Content-Length": body.length });
      res.write(body.subarray(0, body.length >> 1), () => setTimeout(() => res.destroy(), 50));
      return;
    }
    if (name === "stall" && first) {
      res.writeHead(200, { "Content-Length": body.length });
      res.write(body.subarray(0, 1000));  // then nothing, forever
      return;
    }
    if (name === "text") return serveBytes(req, res, notGguf);
    if (name === "endless") {
      // No length, and bytes for ever (until the client hangs up).
      res.writeHead(200, { "Content-Type": "application/octet-stream" });
      const chunk = Buffer.alloc(1 << 16, 7);
      const pump = () => { while (res.write(chunk)) {} };
      res.on("drain", pump);
      res.on("close", () => res.removeListener("drain", pump));
      if (req.method === "HEAD") return res.end();
      return pump();
    }

    return serveBytes(req, res, body, { ignoreRange: name === "norange" });
  }
  const redirect = (to, digest = sha, size = body.length) => {
    res.writeHead(302, { Location: to, "X-Linked-Etag": `"${digest}"`, "X-Linked-Size": String(size) });
    res.end();
  };
  const routes = {
    "/Qwen/Qwen3-0.6B-GGUF/resolve/main/Qwen3-0.6B-Q8_0.gguf": () => redirect("/cdn/ok/model.gguf"),
    "/Qwen/Qwen3-8B-GGUF/resolve/main/Qwen3-8B-Q4_K_M.gguf": () => redirect("/cdn/ok/model.gguf"),
    "/owner/repo/resolve/main/drop.gguf": () => redirect("/cdn/drop/model.gguf"),
    "/owner/repo/resolve/main/parallel.gguf": () => redirect("/cdn/parallel/model.gguf"),
    "/owner/repo/resolve/main/pdrop.gguf": () => redirect("/cdn/pdrop/model.gguf"),
    "/owner/repo/resolve/main/pdrop2.gguf": () => redirect("/cdn/pdrop2/model.gguf"),
    "/owner/repo/resolve/main/partial.gguf": () => redirect("/cdn/partial/model.gguf"),
    "/owner/repo/resolve/main/norange.gguf": () => redirect("/cdn/norange/model.gguf"),
    "/owner/repo/resolve/main/stall.gguf": () => redirect("/cdn/stall/model.gguf"),
    "/owner/repo/resolve/main/bad.gguf": () => redirect("/cdn/ok/model.gguf", "0".repeat(64)),
    "/owner/repo/resolve/main/notgguf.gguf": () => redirect("/cdn/text/x", notGgufSha, notGguf.length),
    "/owner/repo/resolve/main/huge.gguf": () => redirect("/cdn/ok/model.gguf", sha, 4e14),
    "/owner/repo/resolve/main/badsize.gguf": () => redirect("/cdn/ok/model.gguf", sha, "12abc"),
    "/owner/repo/resolve/main/big.gguf": () => redirect("/cdn/ok/model.gguf", sha, 70e9),
    "/a/model.gguf": () => serveBytes(req, res, body),
    "/b/model.gguf": () => serveBytes(req, res, body),
    "/owner/repo/resolve/main/gated.gguf": () => {
      if (req.headers.authorization !== "Bearer secret") { res.writeHead(401); res.end(); return; }
      redirect("http://localhost:" + server.address().port + "/cdn/gated/model.gguf");
    },
  };
  if (routes[url]) return routes[url]();
  res.writeHead(404);
  res.end();
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const port = server.address().port;
const home = path.join(work, "home");

let failures = 0;
const check = (ok, what, detail = "") => {
  console.log(`${ok ? "ok" : "FAIL"} ${what}${ok || !detail ? "" : ": " + detail}`);
  if (!ok) failures++;
};
function zincRun(args, env = {}) {
  return new Promise((resolve) => {
    const p = spawn(zinc, args, { env: { ...process.env, ZINC_HOME: home, HF_ENDPOINT: `http://127.0.0.1:${port}`,
                                         HF_TOKEN: "", ...env } });
    let out = "", err = "";
    p.stdout.on("data", (d) => (out += d));
    p.stderr.on("data", (d) => (err += d));
    p.on("close", (status) => resolve({ status, out, err }));
  });
}
const leftovers = () => {
  const dir = path.join(home, "models");
  if (!fs.existsSync(dir)) return [];
  return fs.readdirSync(dir, { recursive: true }).map(String)
    .filter((f) => /\.gguf(\.part)?$/.test(f) && fs.statSync(path.join(dir, f)).isFile());
};
const fast = ["--retry-delay-ms", "10", "--json"];

// A catalog id through the hub's redirect, verified against the digest computed here.
let r = await zincRun(["pull", "qwen3:0.6b", ...fast]);
let j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.verified === true && j.sha256 === sha && fs.readFileSync(j.file).equals(body),
      "pull a catalog id: verified, byte-identical", r.err);
r = await zincRun(["pull", "qwen3:0.6b", "--json"]);
check(r.status === 0 && JSON.parse(r.out).already_installed === true, "pulling again finds it installed");
r = await zincRun(["run", "-m", "qwen3:0.6b", "-p", "Once upon a time", "-n", "4"]);
check(r.status === 0 && r.out.startsWith("Once upon a time,"), "-m takes the installed id", r.err);
r = await zincRun(["list", "--json"]);
check(r.status === 0 && JSON.parse(r.out).some((m) => m.id === "qwen3:0.6b" && m.verified), "zinc list shows it");
// As text: aligned columns (each column starts where its header does), or Markdown with --markdown.
r = await zincRun(["list"]);
const [listHead, listRow] = r.out.split("\n");
check(r.status === 0 && listHead.startsWith("model") && listRow.startsWith("qwen3:0.6b") &&
      ["size", "architecture", "file"].every((c) => listRow[listHead.indexOf(c) - 1] === " " && listRow[listHead.indexOf(c)] !== " "),
      "zinc list prints aligned columns", r.out);
r = await zincRun(["list", "--markdown"]);
check(r.status === 0 && r.out.startsWith("| model | size | architecture | file |\n|---|"), "zinc list --markdown", r.out);
r = await zincRun(["list", "--available", "--json"]);
const entry = r.status === 0 ? JSON.parse(r.out).find((m) => m.id === "qwen3:0.6b") : null;
check(entry && entry.installed === true && typeof entry.fits.CPU === "boolean" &&
      JSON.parse(r.out).filter((m) => m.installed).length === 1, "the catalog marks it installed and says where it fits");

// A family name alone (or :latest) is its default size, as Ollama's tags are: qwen3 is qwen3:8b.
r = await zincRun(["pull", "qwen3", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.id === "qwen3:8b" && j.verified === true, "pull qwen3 installs qwen3:8b", r.err + r.out);
r = await zincRun(["run", "-m", "qwen3:latest", "-p", "Once upon a time", "-n", "4"]);
check(r.status === 0 && r.out.startsWith("Once upon a time,"), "-m qwen3:latest finds the installed qwen3:8b", r.err);
r = await zincRun(["rm", "qwen3:8b"]);
check(r.status === 0, "zinc rm qwen3:8b", r.err);
r = await zincRun(["run", "-m", "qwen3", "-p", "x"]);
check(r.status === 1 && r.err.includes("model 'qwen3:8b' is not installed: zinc pull qwen3:8b"),
      "an uninstalled family name says which model to pull", r.err);

// A dropped connection: the next attempt asks for the rest with Range.
r = await zincRun(["pull", "hf://owner/repo/drop.gguf", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.retries >= 1 && j.verified && seen.ranges.some((x) => /drop.* bytes=[1-9]\d*-$/.test(x)),
      "a dropped connection is resumed with Range", r.err + JSON.stringify(seen.ranges));

// A stall: no byte for a second, then a reconnect that resumes.
r = await zincRun(["pull", "hf://owner/repo/stall.gguf", "--stall-timeout", "1", ...fast]);
check(r.status === 0 && JSON.parse(r.out).verified && seen.ranges.some((x) => x.includes("stall") && x.endsWith("bytes=1000-")),
      "a stalled download reconnects and resumes", r.err);

// A server that ignores Range after a drop: the file starts over and is still right.
r = await zincRun(["pull", "hf://owner/repo/norange.gguf", ...fast]);
check(r.status === 0 && JSON.parse(r.out).verified, "a server ignoring Range still gives a verified file", r.err);

// An interrupted pull with no retries keeps its partial file; the next pull continues from it.
r = await zincRun(["pull", "hf://owner/repo/partial.gguf", "--retries", "0", ...fast]);
const partDir = path.join(home, "models", "owner-repo-partial.gguf");
const partial = fs.existsSync(path.join(partDir, "partial.gguf.part")) ? fs.statSync(path.join(partDir, "partial.gguf.part")).size : 0;
check(r.status === 1 && r.err.includes("resume") && partial > 0 && !fs.existsSync(path.join(partDir, "partial.gguf")),
      "an interrupted pull keeps only its partial file and says how to resume", r.err);
r = await zincRun(["pull", "hf://owner/repo/partial.gguf", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.resumed_from === partial && j.verified, "the next pull resumes from the partial size",
      `${r.err} resumed_from ${j.resumed_from}, partial ${partial}`);

// Large files over several connections: four byte ranges, each resumed on its own after a drop.
r = await zincRun(["pull", "hf://owner/repo/parallel.gguf", "--connections", "4", "--parallel-min-mb", "0", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
const parallelRanges = seen.ranges.filter((x) => x.startsWith("/cdn/parallel/") && /bytes=\d+-\d+$/.test(x));
check(r.status === 0 && j.verified && j.connections === 4 && parallelRanges.length === 4,
      "a large file comes over four ranges, verified", `${r.err} ${JSON.stringify(parallelRanges)}`);
r = await zincRun(["pull", "hf://owner/repo/pdrop.gguf", "--connections", "3", "--parallel-min-mb", "0", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.verified && j.retries >= 3, "each dropped range resumes on its own", `${r.err} ${r.out}`);
r = await zincRun(["pull", "hf://owner/repo/pdrop2.gguf", "--connections", "3", "--parallel-min-mb", "0", "--retries", "0", ...fast]);
check(r.status === 1 && r.err.includes("resume"), "an interrupted parallel pull says how to resume", r.err);
seen.pdrop2Healed = true;
r = await zincRun(["pull", "hf://owner/repo/pdrop2.gguf", "--connections", "3", "--parallel-min-mb", "0", ...fast]);
j = r.status === 0 ? JSON.parse(r.out) : {};
check(r.status === 0 && j.verified && j.resumed_from > body.length / 3 && j.retries === 0,
      "the next pull continues every range where it stopped", `${r.err} ${r.out}`);

// Failures that leave nothing behind.
const before = leftovers().length;
for (const [what, spec, args, message] of [
  ["a wrong digest", "hf://owner/repo/bad.gguf", [], "SHA-256 mismatch"],
  ["a 404", "hf://owner/repo/missing.gguf", [], "not found (404)"],
  ["a file that is not GGUF", "hf://owner/repo/notgguf.gguf", [], "not a usable GGUF"],
  ["too little disk space", "hf://owner/repo/huge.gguf", ["--max-size", "1000000"], "not enough free disk space"],
  ["a gated file without a token", "hf://owner/repo/gated.gguf", [], "HF_TOKEN"],
  ["an unknown id", "nonsense:1b", [], "unknown model"],
  ["a size header that is not a number", "hf://owner/repo/badsize.gguf", [], "X-Linked-Size header ('12abc') is not a size"],
  ["a file past the default 64 GB cap", "hf://owner/repo/big.gguf", [], "larger than the 64.0 GB this pull accepts"],
  ["an endless body without a length", `http://127.0.0.1:${port}/cdn/endless/model.gguf`, ["--max-size", "0.005"],
   "sent more than 0.0 GB without saying how much"],
]) {
  r = await zincRun(["pull", spec, ...args, "--retry-delay-ms", "10"]);
  check(r.status === 1 && r.err.includes(message) && leftovers().length === before, `${what}: a clear error, nothing left`,
        `${r.status} ${r.err} ${leftovers()}`);
}
r = await zincRun(["pull", "hf://owner/repo/gated.gguf", ...fast], { HF_TOKEN: "secret" });
check(r.status === 0 && JSON.parse(r.out).verified && seen.cdnAuth === 0, "HF_TOKEN opens a gated file and stays off the CDN",
      `${r.err} cdn saw the token ${seen.cdnAuth} times`);

// Two URLs whose files share a name are two models (identity is the URL's host and path).
r = await zincRun(["pull", `http://127.0.0.1:${port}/a/model.gguf`, ...fast]);
const first = r.status === 0 ? JSON.parse(r.out) : {};
r = await zincRun(["pull", `http://127.0.0.1:${port}/b/model.gguf`, ...fast]);
const second = r.status === 0 ? JSON.parse(r.out) : {};
check(first.id === `127.0.0.1:${port}/a/model.gguf` && second.id === `127.0.0.1:${port}/b/model.gguf` &&
      !second.already_installed && first.file !== second.file, "two URLs of the same file name are two models",
      `${r.err} ${JSON.stringify([first, second])}`);

r = await zincRun(["rm", "qwen3:0.6b"]);
const listed = JSON.parse((await zincRun(["list", "--json"])).out);
check(r.status === 0 && !listed.some((m) => m.id === "qwen3:0.6b"), "zinc rm removes it");
r = await zincRun(["rm", "qwen3:0.6b"]);
check(r.status === 1 && r.err.includes("not installed"), "removing it again is a clear error");

server.close();
process.exit(failures ? 1 : 0);
