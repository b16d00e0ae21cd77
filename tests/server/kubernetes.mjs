// deploy/kubernetes.yaml as a kubelet, a Service and Prometheus use it, without a cluster: the manifest
// is parsed (the yaml package), its names must agree with one another (the Service's target port, the
// probes' and the scrape annotation's ports, the selector), and the container's own arguments are run
// (only the models volume's mount and the port replaced by a directory holding stories260K and a free
// port). The startup, readiness and liveness probes' requests must succeed within the startup probe's
// budget, the scrape path must answer Prometheus text, the model must answer through the port the
// Service targets, and SIGTERM must end the server within the grace period.
// Usage: node kubernetes.mjs ORACLE_DIR ZINC STORIES.gguf MANIFEST WORK_DIR
import net from "node:net";
import path from "node:path";
import { createRequire } from "node:module";
import { spawn } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { testRun } from "./start_server.mjs";

const [oracleDir, zinc, model, manifestPath, work] = process.argv.slice(2);
const require = createRequire(path.resolve(oracleDir, "package.json"));
const YAML = require("yaml");
const { check, failures } = testRun(zinc, model);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const freePort = () => new Promise((resolve) => {
  const srv = net.createServer().listen(0, "127.0.0.1", () => { const p = srv.address().port; srv.close(() => resolve(p)); });
});

let proc = null;
try {
  const docs = YAML.parseAllDocuments(readFileSync(manifestPath, "utf8")).map((d) => d.toJS());
  const deployment = docs.find((d) => d.kind === "Deployment");
  const service = docs.find((d) => d.kind === "Service");
  check(deployment && service, "the manifest holds a Deployment and a Service");
  const pod = deployment.spec.template;
  const c = pod.spec.containers[0];
  const portNamed = (p) => (typeof p === "number" ? p : c.ports.find((q) => q.name === p)?.containerPort);
  const containerPort = portNamed("http");
  check(Number.isInteger(containerPort), "the container names its port http", JSON.stringify(c.ports));
  check(Object.entries(deployment.spec.selector.matchLabels).every(([k, v]) => pod.metadata.labels[k] === v) &&
        Object.entries(service.spec.selector).every(([k, v]) => pod.metadata.labels[k] === v),
        "the Deployment's and the Service's selectors match the pods' labels");
  check(service.spec.ports.every((p) => portNamed(p.targetPort) === containerPort), "the Service targets the container's port");
  const probes = ["startupProbe", "readinessProbe", "livenessProbe"].map((k) => [k, c[k]]);
  check(probes.every(([, p]) => p?.httpGet && portNamed(p.httpGet.port) === containerPort), "every probe is an HTTP GET on the port",
        JSON.stringify(probes));
  const ann = pod.metadata.annotations;
  check(ann["prometheus.io/scrape"] === "true" && Number(ann["prometheus.io/port"]) === containerPort,
        "Prometheus scrapes the container's port", JSON.stringify(ann));
  const args = [...c.args];
  const at = (flag) => args.indexOf(flag) + 1;
  check(args[0] === "serve" && at("--port") > 0 && Number(args[at("--port")]) === containerPort && at("--models-dir") > 0 &&
        c.volumeMounts.some((v) => v.mountPath === args[at("--models-dir")]),
        "the container serves the mounted models on its port", JSON.stringify(args));

  // The container's arguments, run here.
  rmSync(work, { recursive: true, force: true });
  const models = path.join(work, "models");
  mkdirSync(models, { recursive: true });
  symlinkSync(path.resolve(model), path.join(models, "stories260K.gguf"));
  const port = await freePort();
  args[at("--models-dir")] = models;
  args[at("--port")] = String(port);
  proc = spawn(zinc, args, { stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr.on("data", (d) => { stderr += d; });
  const exited = new Promise((resolve) => proc.on("exit", (code, signal) => resolve({ code, signal })));
  const get = async (p) => {
    try {
      const r = await fetch(`http://127.0.0.1:${port}${p}`, { signal: AbortSignal.timeout(2000) });
      return { status: r.status, text: await r.text() };
    } catch {
      return { status: 0, text: "" };
    }
  };
  // The startup probe: its path answers 200 within periodSeconds x failureThreshold.
  const startup = c.startupProbe;
  const budgetMs = Math.min(startup.periodSeconds * startup.failureThreshold * 1000, 30000);
  const t0 = Date.now();
  let up = false;
  while (Date.now() - t0 < budgetMs && !(up = (await get(startup.httpGet.path)).status === 200)) await sleep(200);
  check(up, "the startup probe succeeds", stderr);
  for (const [name, p] of probes) {
    const r = await get(p.httpGet.path);
    check(r.status === 200, `${name} ${p.httpGet.path}: 200`, `${r.status} ${r.text}`);
  }
  const metrics = await get(ann["prometheus.io/path"]);
  check(metrics.status === 200 && /^# TYPE zinc_\w+ /m.test(metrics.text), `the scrape path ${ann["prometheus.io/path"]} answers Prometheus text`,
        metrics.text.slice(0, 200));
  const answer = await fetch(`http://127.0.0.1:${port}/v1/completions`, {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ model: "stories260K", prompt: "Once upon a time", max_tokens: 8, temperature: 0 }),
  });
  const body = await answer.json();
  check(answer.status === 200 && body.choices?.[0]?.text?.length > 0, "a model of the volume answers on the Service's port", JSON.stringify(body));
  const loaded = await get(ann["prometheus.io/path"]);
  check(/^zinc_models_loaded 1$/m.test(loaded.text), "the scrape shows the loaded model", loaded.text.match(/^zinc_models_loaded.*$/m)?.[0]);

  // Pod deletion: SIGTERM, then the grace period before SIGKILL.
  const t1 = Date.now();
  proc.kill("SIGTERM");
  const done = await Promise.race([exited, sleep(pod.spec.terminationGracePeriodSeconds * 1000).then(() => null)]);
  check(done !== null, "SIGTERM ends the server within the grace period", `${Date.now() - t1} ms`);
  proc = null;
} catch (e) {
  check(false, "kubernetes manifest run", e.stack || String(e));
} finally {
  if (proc) proc.kill("SIGKILL");
}
process.exit(failures() ? 1 : 0);
