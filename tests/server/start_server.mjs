// Starts `zinc serve` on a free port for a test and resolves once it listens (the port is read from
// its startup line on stderr). Returns { port, base, proc }; the caller kills proc.
import { spawn } from "node:child_process";

export async function startServer(zinc, model, args = []) {
  const proc = spawn(zinc, ["serve", "-m", model, "--port", "0", ...args], { stdio: ["ignore", "ignore", "pipe"] });
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
  return { port, base: `http://127.0.0.1:${port}`, proc };
}
