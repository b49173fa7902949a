"""The Transformers side of transformers_test.cc, run with the venv of tools/hf_venv.sh.

  transformers_check.py make-llama DIR TOKENS
  transformers_check.py make-gpt2 DIR TOKENS
      A small random LlamaForCausalLM (grouped-query attention, rotary positions) or
      GPT2LMHeadModel (its head tied to the token embedding), weights drawn wide enough that its
      logits are far from uniform, saved with save_pretrained(DIR), and a nanoGPT-format token
      file (uint16) of 4000 random tokens.
  transformers_check.py compare DIR TOKENS S LOGITS
      Loads DIR with from_pretrained, scores TOKENS as `pipeforge eval` does (consecutive windows
      of S + 1 tokens, the remainder dropped; inputs the first S, targets the last S) and prints
      JSON: the mean cross-entropy, and the largest difference to the logits PipeForge wrote to
      LOGITS (safetensors, "logits" [windows, S, vocab]) with the largest logit.
"""
import json
import sys

import numpy as np
import torch
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB = 64


def make(family, folder, tokens):
    torch.manual_seed(0)
    if family == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=16, rope_theta=1000.0, rms_norm_eps=1e-5))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=16, n_embd=32, n_layer=2, n_head=4))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                    or name.endswith("ln_f.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, 0.3)
    model.save_pretrained(folder)
    np.random.default_rng(0).integers(0, VOCAB, size=4000).astype(np.uint16).tofile(tokens)


def compare(folder, tokens, seq_len, logits_file):
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = np.fromfile(tokens, dtype=np.uint16).astype(np.int64)
    windows = len(ids) // (seq_len + 1)
    w = torch.tensor(ids[: windows * (seq_len + 1)]).view(windows, seq_len + 1)
    with torch.no_grad():
        logits = model(w[:, :seq_len]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
    theirs = load_file(logits_file)["logits"]
    assert theirs.shape == tuple(logits.shape), (theirs.shape, tuple(logits.shape))
    print(json.dumps({"loss": loss.item(), "windows": windows,
                      "max_logit_diff": float(np.abs(theirs - logits.numpy()).max()),
                      "max_logit": float(np.abs(logits.numpy()).max())}))


if __name__ == "__main__":
    if sys.argv[1] in ("make-llama", "make-gpt2"):
        make(sys.argv[1][len("make-"):], sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "compare":
        compare(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit("unknown command " + sys.argv[1])
