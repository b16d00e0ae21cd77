// Helpers of the server tests: start `zinc serve` on a free port, count checks, talk raw HTTP.
import net from "node:net";
import { readFileSync } from "node:fs";
import { spawn } from "node:child_process";

// Starts `zinc serve` on a free port for a test and resolves once it listens (the port is read from
// its startup line on stderr). Returns { port, base, proc, stderr() }; the caller kills proc. A null
// model starts a server without -m (its arguments say where its models are).
export async function startServer(zinc, model, args = []) {
  const proc = spawn(zinc, ["serve", ...(model ? ["-m", model] : []), "--port", "0", ...args],
                     { stdio: ["ignore", "ignore", "pipe"] });
  let err = "";
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("server did not start: " + err)), 20000);
    proc.stderr.on("data", (d) => {
      err += d;
      const m = err.match(/http:\/\/[^:]+:(\d+)\//);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on("exit", (code) => reject(new Error(`server exited (${code}): ${err}`)));
  });
  return { port, base: `http://127.0.0.1:${port}`, proc, stderr: () => err };
}

// One test script's servers and checks: check() prints ok/FAIL lines, start() starts a server that
// stopAll() ends, failures() counts the FAILs.
export function testRun(zinc, model) {
  let failures = 0;
  const servers = [];
  return {
    check(ok, what, detail = "") {
      console.log(`${ok ? "ok" : "FAIL"} ${what}${ok || !detail ? "" : ": " + detail}`);
      if (!ok) failures++;
    },
    async start(args, serverModel = model) {
      const s = await startServer(zinc, serverModel, args);
      servers.push(s.proc);
      return s;
    },
    stopAll() { for (const p of servers) p.kill("SIGTERM"); },
    failures: () => failures,
  };
}

// One raw HTTP exchange on a new connection: writes `data`, resolves with what came back once the
// server closes or `ms` pass.
export function rawRequest(port, data, ms = 5000) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    let got = "";
    const timer = setTimeout(() => { sock.destroy(); resolve(got); }, ms);
    sock.on("data", (d) => { got += d; });
    sock.on("close", () => { clearTimeout(timer); resolve(got); });
    sock.on("error", () => {});
    sock.on("connect", () => sock.write(data));
  });
}
export const statusOf = (text) => Number((text.match(/^HTTP\/1\.1 (\d+)/) || [0, 0])[1]);
export const rssKb = (pid) => Number((readFileSync(`/proc/${pid}/status`, "utf8").match(/VmRSS:\s+(\d+)/) || [0, 0])[1]);
