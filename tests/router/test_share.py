"""Share links (explorer.router.share)."""

from __future__ import annotations

import base64
import zlib

import pytest

from explorer.errors import BadInput
from explorer.router.share import MAX_SHARE_CHARS, decode_share, encode_share
from tests.router.helpers import SMALL


def test_share_links_refuse_anything_else():
    token = encode_share(SMALL)
    assert token.startswith("v1.") and len(token) < MAX_SHARE_CHARS
    for bad in ["", "v2.abc", "v1.", "v1.@@@", token[:-8], "v1." + "A" * 7000]:
        with pytest.raises(BadInput):
            decode_share(bad)
    bomb = "v1." + base64.urlsafe_b64encode(zlib.compress(b" " * (1 << 20), 9)).decode().rstrip("=")
    with pytest.raises(BadInput, match="more than"):
        decode_share(bomb)
    evil = "v1." + base64.urlsafe_b64encode(zlib.compress(b"__import__('os')", 9)).decode().rstrip("=")
    with pytest.raises(BadInput, match="not valid TOML"):
        decode_share(evil)
