"""The model shapes the prefill measurement knows, and their parameter counts (torch-free).

The counts feed the FLOP formula of design section 4 and the estimate, so they live here rather
than in the torch model: the UI shows them on a machine without torch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

BLOCK_SIZE = 16  # vLLM's default block size; the KV pool and the manager both use it


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """A Llama-style decoder: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU."""

    name: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_model_len: int  # context length: the longest prompt we accept
    rope_theta: float
    rms_norm_eps: float
    tie_word_embeddings: bool
    real_weights: bool  # True: read from a model file; False: seeded random weights
    cpu_ok: bool = True  # False: too big for a CPU in float32 (refused there)
    note: str = ""

    @property
    def params_per_layer(self) -> int:
        h, d = self.hidden_size, self.head_dim
        attn = h * self.num_heads * d + 2 * h * self.num_kv_heads * d + self.num_heads * d * h
        mlp = 3 * h * self.intermediate_size  # gate, up, down
        return attn + mlp + 2 * h  # + the two RMSNorm weights

    @property
    def non_embedding_params(self) -> int:
        """Every parameter a prompt token passes through: the layers and the final norm (the
        embedding is a lookup, and the LM head runs once per prefill, for the last token)."""
        return self.num_layers * self.params_per_layer + self.hidden_size

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def lm_head_params(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        head = 0 if self.tie_word_embeddings else self.lm_head_params
        return self.non_embedding_params + self.embedding_params + head

    @property
    def weights_label(self) -> str:
        """The JSON's "weights" field (design section 4)."""
        return "real, Q4_1/Q8_0 dequantized" if self.real_weights else "random"

    def kv_bytes_per_block(self, dtype_bytes: int, block_size: int = BLOCK_SIZE) -> int:
        """One block of the pool, all layers, K and V."""
        return self.num_layers * 2 * block_size * self.num_kv_heads * self.head_dim * dtype_bytes


TINY = ModelConfig(
    name="tiny",
    num_layers=2,
    hidden_size=64,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    intermediate_size=128,
    vocab_size=512,
    max_model_len=4096,
    rope_theta=10000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    real_weights=False,
    note="a small random-weight model for tests: well under a second on a CPU",
)

# SmolLM2-135M-Instruct as its GGUF file describes it (checked against the file's metadata when
# the weights are loaded).
SMOLLM2_135M = ModelConfig(
    name="smollm2-135m",
    num_layers=30,
    hidden_size=576,
    num_heads=9,
    num_kv_heads=3,
    head_dim=64,
    intermediate_size=1536,
    vocab_size=49152,
    max_model_len=8192,
    rope_theta=100000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=True,
    real_weights=True,
    note="SmolLM2-135M-Instruct, its real weights (Q4_1, and Q8_0 for the tied embedding / LM head) "
    "dequantized to float",
)

# Llama-3.1-8B's shape with random weights. Timing depends on shapes, not values, so random
# weights measure the same time; the llama3 rope frequency scaling is left out for the same reason.
LLAMA3_8B_SHAPE = ModelConfig(
    name="llama3-8b-shape",
    num_layers=32,
    hidden_size=4096,
    num_heads=32,
    num_kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=128256,
    max_model_len=131072,
    rope_theta=500000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    real_weights=False,
    cpu_ok=False,
    note="random weights in Llama-3.1-8B's shape, for a GPU: timing depends on shapes, not values",
)

MODELS: dict[str, ModelConfig] = {m.name: m for m in (TINY, SMOLLM2_135M, LLAMA3_8B_SHAPE)}

# The same shape as SmolLM2-135M with random weights: what the GPU check uses, since that box
# has no model file.
SMOLLM2_135M_SHAPE = replace(
    SMOLLM2_135M,
    name="smollm2-135m-shape",
    real_weights=False,
    note="random weights in SmolLM2-135M's shape",
)
