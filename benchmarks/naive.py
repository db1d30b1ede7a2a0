"""Naive baselines, written the way a user without openjev-batch would: `sglang.Engine` and transformers
called directly, nothing of the product's imported (nano-vllm's bench.py habit).

The prompts are built here from the tokenizer's own chat template (`apply_chat_template`, thinking off):
system instruction, then the conversation, the question and its options lettered A, B, … in the user turn,
then `Answer:`; one branch per question, a row's prefix being the common start of its branches. That is
the product's layout, not its exact ids, so each result records its own token counts next to the time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

SYSTEM = "Read the conversation and answer the question with the letter of one option."
NOUL = ("no", "unsure", "likely", "yes")


def _options(q: dict) -> list[str]:
    if q["type"] == "noul":
        return list(NOUL)
    crit = q.get("criteria") or {}
    return list(crit) if isinstance(crit, dict) else [str(c) for c in crit]


def _transcript(state) -> str:
    if isinstance(state, str):
        return state
    return "\n".join(f"{m['role']}: {m['content']}" for m in state)


def branches(
    tok, path: Path, questions: Path | None
) -> list[tuple[list[int], list[list[int]], list[list[int]]]]:
    """Per row: (prefix ids, branch ids, label ids per branch) built from the chat template."""
    shared = json.loads(Path(questions).read_text()) if questions else None
    out = []
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            ids, labels = [], []
            # the conversation alone: the common start with it ends where a question begins (one-question rows too)
            conv = [{"role": "system", "content": SYSTEM},
                    {"role": "user", "content": f"Conversation:\n{_transcript(row['state'])}\n\nQuestion:"}]  # fmt: skip
            base = tok(tok.apply_chat_template(conv, tokenize=False), add_special_tokens=False)["input_ids"]
            for q in (shared or row["questions"]).values():
                opts = _options(q)
                letters = [chr(65 + i) for i in range(len(opts))]
                user = (
                    f"Conversation:\n{_transcript(row['state'])}\n\nQuestion: {q['instructions']}\nOptions:\n"
                    + "".join(f"{a}. {o}\n" for a, o in zip(letters, opts, strict=True))
                    + "Reply with the letter of one option."
                )
                msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
                text = tok.apply_chat_template(
                    msgs, tokenize=False, add_generation_prompt=True, enable_thinking=False
                )
                ids.append(tok(text + "Answer:", add_special_tokens=False)["input_ids"])
                labels.append([tok(" " + a, add_special_tokens=False)["input_ids"][-1] for a in letters])
            n = 0
            while all(len(b) > n + 1 for b in [*ids, base]) and len({b[n] for b in [*ids, base]}) == 1:
                n += 1
            out.append((ids[0][:n], ids, labels))
    return out


def start_engine(model: Path | str, **kwargs):
    """`sglang.Engine` with the kit's settings (no decode: no CUDA graphs) plus `kwargs`; start seconds."""
    import sglang

    kw = dict(model_path=str(model), log_level="warning", random_seed=0, disable_cuda_graph=True)
    kw.update(kwargs)
    t = time.perf_counter()
    engine = sglang.Engine(**kw)
    return engine, round(time.perf_counter() - t, 1)


def flush(engine) -> None:
    """Empty the radix cache; sglang refuses while requests are still being retired, so retry."""
    for _ in range(100):
        if getattr(engine.flush_cache(), "success", True):
            return
        time.sleep(0.05)
    raise RuntimeError("radix cache could not be flushed")


def naive(engine, rows, one_call: bool = False) -> dict:
    """Every prefix in one generate call, then every branch in one call (max_new_tokens=0, the label
    logprobs at the last position). `one_call`: the branches only, no prefix warm-up."""
    ids = [b for _, bs, _ in rows for b in bs]
    labels = [lab for _, _, ls in rows for lab in ls]

    def gen(i, lab):
        return engine.generate(
            input_ids=i,
            sampling_params={"max_new_tokens": 0, "temperature": 0},
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=lab,
        )

    flush(engine)
    t = time.perf_counter()
    if not one_call:
        pre = {tuple(p): ls[0] for p, _, ls in rows}
        gen([list(p) for p in pre], list(pre.values()))
    outs = gen(ids, labels)
    dt = time.perf_counter() - t
    return {
        "s": round(dt, 3),
        "branches": len(ids),
        "branch_tokens": sum(map(len, ids)),
        "cached_tokens": sum(o["meta_info"]["cached_tokens"] for o in outs),
    }


def hf_batched(model_dir: Path, rows, bs: int = 64, device: str = "cuda") -> dict:
    """transformers: every branch left-padded in batches of `bs`, logits_to_keep=1, no prefix reuse."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    if any(Path(model_dir).glob("*.safetensors")):
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    else:  # config only (8B shape): random init straight on the device, like load_format=dummy
        with torch.device(device):
            m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir), dtype=dtype).eval()
    flat = [(b, lab) for _, bs_, ls in rows for b, lab in zip(bs_, ls, strict=True)]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(flat), bs):
            chunk = flat[i : i + bs]
            n = max(len(x) for x, _ in chunk)
            ids = torch.zeros(len(chunk), n, dtype=torch.long, device=device)
            att = torch.zeros_like(ids)
            for j, (x, _) in enumerate(chunk):  # left padding: the last position is real for every row
                ids[j, n - len(x) :] = torch.tensor(x)
                att[j, n - len(x) :] = 1
            logits = m(input_ids=ids, attention_mask=att, logits_to_keep=1).logits[:, -1].float()
            lp = torch.log_softmax(logits, -1)
            k = max(len(lab) for _, lab in chunk)  # questions differ in option count: pad with the first
            idx = [list(lab) + [lab[0]] * (k - len(lab)) for _, lab in chunk]
            lp.gather(1, torch.tensor(idx, device=device)).cpu()
    sync()
    dt = time.perf_counter() - t
    del m
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"s": round(dt, 3), "branches": len(flat)}
