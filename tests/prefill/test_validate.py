"""Settings checks: every bad input is a BadInput with a message that names the problem."""

from __future__ import annotations

import pytest

from explorer.errors import BadInput
from explorer.prefill import validate
from explorer.prefill.validate import check_settings, max_hit


def test_max_hit_is_whole_blocks_short_of_the_last_token():
    assert max_hit(1200) == 1184
    assert max_hit(1201) == 1200
    assert max_hit(16) == 0
    assert max_hit(17) == 16


@pytest.mark.parametrize(
    "model, device, prompt, hit, words",
    [
        ("gpt-9", "auto", 200, 96, "unknown model"),
        ("tiny", "tpu", 200, 96, "unknown device"),
        ("tiny", "auto", 200, 95, "multiple of the block size"),
        ("tiny", "auto", 200, 208, "at most 192"),
        ("tiny", "auto", 1200, 1200, "at most 1184"),
        ("tiny", "auto", 5000, 0, "context"),
        ("smollm2-135m", "auto", 8193, 0, "context"),
        ("tiny", "auto", 0, 0, "at least 1"),
    ],
)
def test_bad_settings(model, device, prompt, hit, words):
    with pytest.raises(BadInput, match=words):
        check_settings(model, device, prompt, hit)


def test_good_settings():
    assert check_settings("tiny", "auto", 200, 192).name == "tiny"
    assert check_settings("smollm2-135m", "cpu", 8192, 8176).max_model_len == 8192


def test_no_torch(monkeypatch):
    monkeypatch.setattr(validate, "torch_available", lambda: False)
    cfg = check_settings("tiny", "auto", 200, 96)
    with pytest.raises(BadInput, match="needs torch"):
        validate.resolve_device("auto", cfg)
