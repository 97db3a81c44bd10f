"""Bad input: typed errors (explorer.core.errors) with messages that say what was wrong."""

from __future__ import annotations

import pytest

from explorer.core.errors import ConfigError, RequestError, SchedulingError
from explorer.core.hashing import init_none_hash
from explorer.core.kv_cache_manager import KVCacheManager
from explorer.core.request import LoRARequest, MultiModalFeature, Request
from explorer.errors import BadInput


def test_all_core_errors_are_bad_input_and_value_error():
    """Every core error is a BadInput (one line for the CLI and UI) and a ValueError (as vLLM's)."""
    for cls in (ConfigError, RequestError, SchedulingError):
        assert issubclass(cls, BadInput) and issubclass(cls, ValueError)


def test_unknown_algo():
    with pytest.raises(ConfigError, match=r"unsupported hash algorithm 'md5'.*sha256"):
        init_none_hash("md5")


def test_block_size_zero():
    with pytest.raises(ConfigError, match="block_size must be a positive integer, got 0"):
        KVCacheManager(8, 0)


@pytest.mark.parametrize("n", [0, 1])
def test_num_blocks_below_two(n):
    with pytest.raises(ConfigError, match=rf"num_blocks must be an integer >= 2.*got {n}"):
        KVCacheManager(n)


def test_max_model_len_zero():
    with pytest.raises(ConfigError, match="max_model_len"):
        KVCacheManager(8, max_model_len=0)


def test_empty_prompt():
    with pytest.raises(RequestError, match="'r' has an empty prompt"):
        Request("r", [])


def test_image_outside_the_prompt():
    with pytest.raises(RequestError, match=r"image 'img' covers tokens \[10, 30\), outside the 20-token prompt"):
        Request("r", list(range(20)), mm_features=[MultiModalFeature("img", 10, 20)])
    with pytest.raises(RequestError, match="outside"):
        Request("r", list(range(20)), mm_features=[MultiModalFeature("img", -1, 2)])


def test_overlapping_images():
    feats = [MultiModalFeature("a", 0, 10), MultiModalFeature("b", 5, 3)]
    with pytest.raises(RequestError, match="'b' at offset 5 overlaps the previous image"):
        Request("r", list(range(20)), mm_features=feats)


def test_adjacent_images_are_fine():
    Request("r", list(range(20)), mm_features=[MultiModalFeature("a", 0, 10), MultiModalFeature("b", 10, 3)])


def test_image_of_length_zero():
    with pytest.raises(RequestError, match="'img' has length 0; it must be >= 1"):
        Request("r", list(range(20)), mm_features=[MultiModalFeature("img", 3, 0)])


def test_image_with_empty_id():
    with pytest.raises(RequestError, match="non-empty id"):
        Request("r", list(range(20)), mm_features=[MultiModalFeature("", 3, 2)])


def test_lora_with_empty_path():
    with pytest.raises(RequestError, match="LoRA 'sql' needs a non-empty path"):
        LoRARequest("sql", 1, "")


def test_lora_with_empty_name_or_bad_id():
    with pytest.raises(RequestError, match="non-empty name"):
        LoRARequest("", 1, "p")
    with pytest.raises(RequestError, match="integer id >= 1"):
        LoRARequest("a", 0, "p")


def test_allocate_slots_with_nothing_to_compute():
    mgr = KVCacheManager(8)
    with pytest.raises(SchedulingError, match="num_new_tokens must be greater than 0"):
        mgr.allocate_slots(Request("r", [1, 2, 3]), 0)
