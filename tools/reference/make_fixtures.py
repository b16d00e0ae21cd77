#!/usr/bin/env python3
"""Tiny random-weight checkpoints and their reference outputs, made with Hugging Face transformers.

Run on a machine with torch + transformers (the GPU machine; the work itself runs on its CPU):
    python3 tools/reference/make_fixtures.py OUT_DIR [NAME ...]
    python3 tools/reference/make_fixtures.py --mtp OUT_DIR qwen3_5 qwen3_5_moe   (with the MTP head: the
        same model plus mtp.safetensors; tests/models/fixtures-mtp keeps what differs from tests/models/fixtures)
For each architecture (or only the named fixtures) it writes OUT_DIR/<arch>/ with a bf16 safetensors checkpoint, config.json, a
small byte-level BPE tokenizer (tokenizer.json, tokenizer_config.json) and reference.json: fixed token
sequences, the float64 logits at every position of each (logits_<i>.f32, float32 little-endian,
[tokens x vocab]) and a 32-token greedy continuation. Dimensions are multiples of 256 so K-quants
apply; output weights are scaled so the top-1 margin is visible after quantization.
"""
import copy
import json
import os
import sys

import numpy as np
import safetensors.torch
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

VOCAB = 512
SEQ_LEN = 16
GREEDY = 32


def corpus():
    words = ("the a little cat dog sat on mat ran fast slow big small red blue green house tree river "
             "and but then when where who what is was were be been have has had do does did say said "
             "one two three four five six seven eight nine ten hello world model token zinc quantum").split()
    rng = np.random.default_rng(7)
    lines = []
    for _ in range(4000):
        n = int(rng.integers(4, 14))
        lines.append(" ".join(words[int(i)] for i in rng.integers(0, len(words), n)).capitalize() + ".")
    lines += ["Numbers: 12345 678 90.", "Code: for (int i = 0; i < n; ++i) { x += y; }", "Émoji 🙂 and 中文 text."]
    return lines


def make_tokenizer(out):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<|bos|>", "<|eos|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(corpus(), trainer)
    # The corpus yields fewer merges than VOCAB allows: the model's vocab_size stays VOCAB, so the
    # embedding has rows no token uses, as many released models do (the converter pads the list).
    assert tok.get_vocab_size() <= VOCAB, tok.get_vocab_size()
    tok.save(os.path.join(out, "tokenizer.json"))
    n_tokens = tok.get_vocab_size()
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|bos|>", "eos_token": "<|eos|>", "add_bos_token": False,
                   "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"}, f, indent=2)
    return n_tokens


def configs():
    common = dict(vocab_size=VOCAB, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                  bos_token_id=0, eos_token_id=1)
    return {
        "llama": transformers.LlamaConfig(**common, rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False),
        "qwen2": transformers.Qwen2Config(**common, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False),
        "qwen3": transformers.Qwen3Config(**common, head_dim=128, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                          tie_word_embeddings=False),
        # Long-context rotary schemes, with original contexts short enough to matter within 48 positions:
        # Llama 3.1's per-frequency divisors and YaRN (max_position_embeddings = factor * original).
        "llama_rope_llama3": transformers.LlamaConfig(
            **common, rms_norm_eps=1e-5, tie_word_embeddings=False,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
        "qwen3_yarn": transformers.Qwen3Config(
            **common, head_dim=128, rms_norm_eps=1e-6, tie_word_embeddings=False,
            rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                             "original_max_position_embeddings": 64}),
        # Gemma 3's released layout: five sliding-window layers, then one global layer. Narrower than the
        # others so six layers stay small; a 4-token window matters within the 16-token sequences.
        "gemma3": transformers.Gemma3TextConfig(**dict(common, intermediate_size=256, num_hidden_layers=6,
                                                       num_attention_heads=2, num_key_value_heads=1),
                                                head_dim=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                                rope_local_base_freq=10000.0, sliding_window=4,
                                                query_pre_attn_scalar=64, tie_word_embeddings=True),
    }


def sparse_configs():
    """Issue 9's families: MoE, hybrid gated-DeltaNet, GPT-OSS, Gemma 4. Two or six layers, four experts,
    so each checkpoint stays under ~4 MB while every kind of layer appears."""
    common = dict(vocab_size=VOCAB, hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  max_position_embeddings=256, bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    hybrid = dict(common, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
                  linear_conv_kernel_dim=4, linear_key_head_dim=64, linear_value_head_dim=64,
                  linear_num_key_heads=2, linear_num_value_heads=4, partial_rotary_factor=0.25,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
                  rms_norm_eps=1e-6)
    moe = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=128, shared_expert_intermediate_size=128,
               norm_topk_prob=True)
    out = {}
    out["qwen3_moe"] = lambda: transformers.Qwen3MoeConfig(
        **dict(common, num_hidden_layers=2), intermediate_size=512, moe_intermediate_size=256, num_local_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    out["qwen3_next"] = lambda: transformers.Qwen3NextConfig(**hybrid, intermediate_size=512, **moe)
    out["qwen3_5"] = lambda: transformers.Qwen3_5TextConfig(**hybrid, intermediate_size=512)
    out["qwen3_5_moe"] = lambda: transformers.Qwen3_5MoeTextConfig(**hybrid, **{k: v for k, v in moe.items() if k != "norm_topk_prob"})
    out["gpt_oss"] = lambda: transformers.GptOssConfig(
        **dict(common, num_hidden_layers=2), intermediate_size=256, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=4, layer_types=["sliding_attention", "full_attention"], attention_bias=True, rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                         "original_max_position_embeddings": 64, "rope_theta": 150000.0})
    g4 = dict(common, num_attention_heads=2, num_key_value_heads=1, sliding_window=4, rms_norm_eps=1e-6,
              hidden_size_per_layer_input=0, vocab_size_per_layer_input=VOCAB, final_logit_softcapping=30.0)
    # The global layer keeps a head width of its own (released models double it), at 128 so the file
    # stays small.
    out["gemma4"] = lambda: transformers.Gemma4TextConfig(
        **dict(g4, num_hidden_layers=6, intermediate_size=256,
               layer_types=["sliding_attention"] * 5 + ["full_attention"]),
        per_layer_config={"5": {"head_dim": 128}})
    # The released 31B's global layers: more KV heads than the local ones, and values that are the keys
    # (attention_k_eq_v, no v_proj).
    def gemma4_global_kv():
        base = dict(g4, num_hidden_layers=6, intermediate_size=256,
                    layer_types=["sliding_attention"] * 5 + ["full_attention"], attention_k_eq_v=True)
        try:
            cfg = transformers.Gemma4TextConfig(**base, per_layer_config={"5": {"head_dim": 128, "num_key_value_heads": 2}})
            print("gemma4_global_kv: per_layer_config", cfg.to_dict().get("per_layer_config"))
            return cfg
        except Exception as e:
            print(f"gemma4_global_kv: per_layer_config refused ({e}); global_* keys instead")
            return transformers.Gemma4TextConfig(**base, global_head_dim=128, num_global_key_value_heads=2)
    out["gemma4_global_kv"] = gemma4_global_kv
    out["gemma4_moe"] = lambda: transformers.Gemma4TextConfig(
        **dict(g4, num_hidden_layers=2, intermediate_size=256, layer_types=["sliding_attention", "full_attention"]),
        enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=128)
    return out


def randomize_sparse(model, seed):
    """Perturbs the model's own initialisation: norms keep their convention (1 or 0 centred), DeltaNet's
    A_log and dt_bias their ranges; routers get larger weights so expert choices have visible margins."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if p.dim() == 1 or "A_log" in name or "dt_bias" in name:
                p.copy_(p + 0.1 * noise)
            elif "router" in name or name.endswith("mlp.gate.weight") or ".gate.weight" in name and "proj" not in name:
                p.copy_(0.5 * noise)
            elif "lm_head" in name or "embed_tokens" in name:
                p.copy_(0.25 * noise)
            else:
                p.copy_(0.04 * noise)


def randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    gemma = "gemma" in type(model).__name__.lower()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms (and biases): around their neutral value, perturbed
                base = 0.0 if ("bias" in name or gemma) else 1.0  # Gemma's norms scale by (1 + w)
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif "lm_head" in name or "embed_tokens" in name:
                # Gemma multiplies embeddings by sqrt(hidden) and ties the output to them: smaller values
                # keep its logits in the same range as the others'.
                p.copy_((0.06 if gemma else 0.25) * torch.randn(p.shape, generator=g))
            else:
                # Small enough that each block perturbs the residual stream rather than replacing it, as
                # in trained models; larger values make these random models chaotic, amplifying
                # quantization noise tenfold.
                p.copy_(0.04 * torch.randn(p.shape, generator=g))


def add_mtp(arch, cfg, out, model, seqs, ref):
    """Qwen3.5's multi-token-prediction head (mtp.*, which transformers loads no module for): token t+1's
    embedding and token t's final hidden state, each RMS-normed (pre_fc_norm_embedding / _hidden), side
    by side through fc, one full-attention decoder layer, a final norm (mtp.norm), the model's lm_head:
    logits for token t+2. The reference runs the layer and the norm as a one-layer model of the same
    family, so every op is transformers' own; written to mtp_logits_<i>.f32 ([tokens - 1 x vocab], row i
    for position i) and reference.json's "mtp"."""
    mcfg = copy.deepcopy(cfg)
    mcfg.num_hidden_layers = 1
    mcfg.layer_types = ["full_attention"]
    torch.manual_seed(1)
    mini = transformers.AutoModelForCausalLM.from_config(mcfg, dtype=torch.float32)
    randomize_sparse(mini, seed=4321)
    d = cfg.hidden_size
    g = torch.Generator().manual_seed(99)
    mtp = {"mtp.fc.weight": 0.04 * torch.randn(d, 2 * d, generator=g),
           "mtp.pre_fc_norm_embedding.weight": 0.1 * torch.randn(d, generator=g),
           "mtp.pre_fc_norm_hidden.weight": 0.1 * torch.randn(d, generator=g)}
    for name, p in mini.model.named_parameters():
        if name.startswith("layers.0."):
            mtp["mtp." + name] = p.detach()
        elif name == "norm.weight":
            mtp["mtp.norm.weight"] = p.detach()
    mtp = {k: v.to(torch.bfloat16).contiguous() for k, v in mtp.items()}
    # A shard of its own beside the model's: tests/models/fixtures-mtp keeps only what differs from the
    # fixture without the head (the model's weights are the same, seed for seed).
    safetensors.torch.save_file(mtp, os.path.join(out, "mtp.safetensors"), metadata={"format": "pt"})
    weight_map = {k: "model.safetensors" for k in safetensors.torch.load_file(os.path.join(out, "model.safetensors"))}
    weight_map.update({k: "mtp.safetensors" for k in mtp})
    with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=1)
    with open(os.path.join(out, "config.json")) as f:
        config = json.load(f)
    config["mtp_num_hidden_layers"] = 1
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(out, "parameters.txt"), "a") as f:
        for name, t in mtp.items():
            f.write(f"{name} {list(t.shape)}\n")
    # The same bf16 values in float64.
    mcfg._experts_implementation = "eager"
    mini = transformers.AutoModelForCausalLM.from_config(mcfg, dtype=torch.float64)
    if hasattr(mini, "set_experts_implementation"):
        mini.set_experts_implementation("eager")
    state = mini.model.state_dict()
    for k in state:
        src = "mtp.norm.weight" if k == "norm.weight" else "mtp." + k
        if src in mtp:
            state[k] = mtp[src].to(torch.float64)
    mini.model.load_state_dict(state)
    mini = mini.eval()
    norm_cls = type(model.model.norm)
    norms = {}
    for key in ("mtp.pre_fc_norm_embedding.weight", "mtp.pre_fc_norm_hidden.weight"):
        n = norm_cls(d, eps=cfg.rms_norm_eps).to(torch.float64)
        with torch.no_grad():
            n.weight.copy_(mtp[key].to(torch.float64))
        norms[key] = n
    fc = mtp["mtp.fc.weight"].to(torch.float64)
    ref["mtp"] = {"logits": [], "margins": []}
    with torch.no_grad():
        for i, s in enumerate(seqs):
            ids = torch.tensor([s])
            h = model.model(ids).last_hidden_state[:, :-1]  # final-normed rows of tokens 0..n-2
            e = model.model.embed_tokens(ids)[:, 1:]          # tokens 1..n-1
            x = torch.cat([norms["mtp.pre_fc_norm_embedding.weight"](e), norms["mtp.pre_fc_norm_hidden.weight"](h)], dim=-1) @ fc.T
            y = mini.model(inputs_embeds=x).last_hidden_state
            logits = model.lm_head(y)[0].to(torch.float64).numpy()
            logits.astype("<f4").tofile(os.path.join(out, f"mtp_logits_{i}.f32"))
            ref["mtp"]["logits"].append({"file": f"mtp_logits_{i}.f32", "shape": list(logits.shape)})
            top2 = np.sort(logits, axis=-1)[:, -2:]
            ref["mtp"]["margins"].append(float(np.median(top2[:, 1] - top2[:, 0])))
    print(f"{arch}: mtp head, median top-1 margin {ref['mtp']['margins']}")


def main(out_root, names, mtp=False):
    all_configs = dict(configs())
    for arch, make in sparse_configs().items():
        if names and arch not in names:
            continue
        try:
            all_configs[arch] = make()
        except Exception as e:  # report and go on: one family's config must not stop the others
            print(f"{arch}: config failed: {type(e).__name__}: {e}")
    for arch, cfg in all_configs.items():
        if names and arch not in names:
            continue
        try:
            make_one(arch, cfg, out_root, mtp)
        except Exception as e:  # the other families still get their fixtures
            import traceback
            traceback.print_exc()
            print(f"{arch}: failed: {type(e).__name__}: {e}")


def make_one(arch, cfg, out_root, mtp=False):
    print(arch, "rope:", getattr(cfg, "rope_parameters", None))
    out = os.path.join(out_root, arch)
    os.makedirs(out, exist_ok=True)
    n_tokens = make_tokenizer(out)
    torch.manual_seed(0)
    sparse = arch in sparse_configs()
    try:
        model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    except Exception as e:
        print(f"{arch}: model failed: {type(e).__name__}: {e}")
        return
    (randomize_sparse if sparse else randomize)(model, seed=1234)
    if sparse:
        with open(os.path.join(out, "parameters.txt"), "w") as f:
            for name, p in model.named_parameters():
                f.write(f"{name} {list(p.shape)}\n")
    # Stored weights are bf16 (small files); the reference runs the same bf16 values in float64. The
    # float64 model is built fresh and loaded from the bf16 weights: converting the bf16 model back
    # would keep bf16-rounded rotary frequencies (a buffer, not a weight), which real models lack.
    model = model.to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    weights = model.state_dict()
    if sparse:
        # The grouped expert kernels have no float64 path: run the experts one by one.
        cfg._experts_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float64)
    if sparse and hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    model.load_state_dict({k: v.to(torch.float64) for k, v in weights.items()})
    model = model.eval()
    rng = np.random.default_rng(11)
    # Real tokens only: ids past the tokenizer's list exist in the embedding but not in every GGUF
    # (Gemma's converter drops those rows).
    seqs = [[0] + [int(t) for t in rng.integers(2, n_tokens, SEQ_LEN - 1)] for _ in range(3)]
    ref = {"transformers": transformers.__version__, "torch": torch.__version__, "architecture": arch,
           "n_tokens": n_tokens,
           "sequences": seqs, "logits": [], "greedy_prompt": seqs[0], "margins": []}
    with torch.no_grad():
        for i, s in enumerate(seqs):
            logits = model(torch.tensor([s])).logits[0].to(torch.float64).numpy()
            logits.astype("<f4").tofile(os.path.join(out, f"logits_{i}.f32"))
            ref["logits"].append({"file": f"logits_{i}.f32", "shape": list(logits.shape)})
            top2 = np.sort(logits, axis=-1)[:, -2:]
            ref["margins"].append(float(np.median(top2[:, 1] - top2[:, 0])))
        # Greedy over real tokens only, for the same reason.
        gen = model.generate(torch.tensor([seqs[0]]), max_new_tokens=GREEDY, do_sample=False,
                             min_new_tokens=GREEDY, pad_token_id=1,
                             suppress_tokens=list(range(n_tokens, VOCAB)) or None)
        ref["greedy"] = [int(t) for t in gen[0][len(seqs[0]):]]
    if mtp:
        add_mtp(arch, cfg, out, model, seqs, ref)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump(ref, f, indent=1)
    size = sum(os.path.getsize(os.path.join(out, n)) for n in os.listdir(out))
    print(f"{arch}: {size / 1e6:.2f} MB, median top-1 margin {ref['margins']}, greedy {ref['greedy'][:8]}...")


if __name__ == "__main__":
    args = sys.argv[1:]
    # --mtp: the hybrid families with a multi-token-prediction head (tests/models/fixtures-mtp).
    with_mtp = "--mtp" in args
    args = [a for a in args if a != "--mtp"]
    main(args[0] if args else "fixtures", args[1:], with_mtp)
