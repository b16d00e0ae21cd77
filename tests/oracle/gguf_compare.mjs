// Compares `zinc inspect --json --full-arrays` with an independent GGUF parser (@huggingface/gguf)
// on every file given: format version, every metadata key in order with its type, element type and
// value, every tensor's name, shape, type and offset, and the data section offset.
// Usage: node gguf_compare.mjs ZINC_BINARY FILE.gguf...
import { execFileSync } from "node:child_process";
import { gguf, GGMLQuantizationType } from "@huggingface/gguf";

const [zinc, ...files] = process.argv.slice(2);
const VALUE_TYPES = ["uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array",
                     "uint64", "int64", "float64"];
let failures = 0;

function fail(file, what) {
  console.error(`MISMATCH ${file}: ${what}`);
  failures++;
}

// Both sides as plain JS values: bigints become numbers (test files hold small values), float32 is
// compared after rounding to float32, since zinc prints its shortest decimal form.
function same(ours, theirs, type, subType) {
  if (type === 9) {
    if (!Array.isArray(ours) || !Array.isArray(theirs) || ours.length !== theirs.length) return false;
    // Nested arrays: the oracle does not report inner element types, so compare structurally.
    return ours.every((v, i) => same(v, theirs[i], Array.isArray(theirs[i]) ? 9 : subType, undefined));
  }
  if (typeof theirs === "bigint") theirs = Number(theirs);
  if (type === 6) return Math.fround(ours) === Math.fround(theirs);
  // The oracle decodes strings with TextDecoder, which drops a leading byte-order mark (llama's
  // vocabulary has a token that is exactly U+FEFF); zinc keeps the bytes as stored.
  if (type === 8) return ours.replace(/^\uFEFF/, "") === theirs;
  return ours === theirs;
}

for (const file of files) {
  const ours = JSON.parse(execFileSync(zinc, ["inspect", "--json", "--full-arrays", file],
                                       { maxBuffer: 1 << 30, encoding: "utf8" }));
  const ref = await gguf(file, { allowLocalFile: true, typedMetadata: true });
  const tm = ref.typedMetadata;
  if (ours.version !== tm.version.value) fail(file, `version ${ours.version} vs ${tm.version.value}`);
  const refKeys = Object.keys(tm).filter((k) => !["version", "tensor_count", "kv_count"].includes(k));
  const ourKeys = ours.metadata.map((m) => m.key);
  if (JSON.stringify(refKeys) !== JSON.stringify(ourKeys)) fail(file, `keys differ:\n${ourKeys}\n${refKeys}`);
  for (const m of ours.metadata) {
    const r = tm[m.key];
    if (!r) continue;
    if (m.type !== VALUE_TYPES[r.type]) fail(file, `${m.key}: type ${m.type} vs ${VALUE_TYPES[r.type]}`);
    if (r.type === 9 && m.element_type !== VALUE_TYPES[r.subType]) {
      fail(file, `${m.key}: element type ${m.element_type} vs ${VALUE_TYPES[r.subType]}`);
    }
    if (m.truncated) fail(file, `${m.key}: zinc truncated the array despite --full-arrays`);
    if (!same(m.value, r.value, r.type, r.subType)) {
      fail(file, `${m.key}: value ${JSON.stringify(m.value).slice(0, 200)} vs ${String(r.value).slice(0, 200)}`);
    }
  }
  if (ours.tensors.length !== ref.tensorInfos.length) {
    fail(file, `tensor count ${ours.tensors.length} vs ${ref.tensorInfos.length}`);
  }
  ref.tensorInfos.forEach((t, i) => {
    const o = ours.tensors[i];
    if (!o) return;
    const shape = t.shape.map(Number);
    if (o.name !== t.name) fail(file, `tensor ${i} name ${o.name} vs ${t.name}`);
    if (JSON.stringify(o.shape) !== JSON.stringify(shape)) fail(file, `${t.name}: shape ${o.shape} vs ${shape}`);
    if (o.type !== GGMLQuantizationType[t.dtype]) fail(file, `${t.name}: type ${o.type} vs ${GGMLQuantizationType[t.dtype]}`);
    if (o.offset !== Number(t.offset)) fail(file, `${t.name}: offset ${o.offset} vs ${t.offset}`);
  });
  if (ours.tensors.length > 0 && ours.data_offset !== Number(ref.tensorDataOffset)) {
    fail(file, `data offset ${ours.data_offset} vs ${ref.tensorDataOffset}`);
  }
  console.log(`ok ${file}: ${ours.metadata.length} keys, ${ours.tensors.length} tensors`);
}
if (failures > 0) {
  console.error(`${failures} mismatches`);
  process.exit(1);
}
