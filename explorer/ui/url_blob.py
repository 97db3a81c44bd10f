"""Compressed JSON in one URL value (an uploaded scenario, the playground's edits): JSON, then
zlib, then URL-safe base64; read back with caps on both the text and what it unpacks to."""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any

from explorer.errors import BadInput
from explorer.viz.text import check_text

URL_BLOB_CAP = 6_000  # characters of one compressed URL value
URL_BLOB_MAX_BYTES = 512 * 1024  # decompressed size refused beyond this


def encode_blob(obj: Any) -> str:
    """JSON -> zlib -> URL-safe base64 without padding."""
    raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode("ascii").rstrip("=")


def decode_blob(text: str, what: str, max_chars: int = URL_BLOB_CAP * 2) -> Any:
    """The inverse of `encode_blob`, refusing anything oversized or malformed (BadInput)."""
    if not isinstance(text, str) or len(text) > max_chars:
        raise BadInput(f"the link's {what} is too long ({len(text):,} characters, at most {max_chars:,})")
    try:
        packed = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        d = zlib.decompressobj()
        raw = d.decompress(packed, URL_BLOB_MAX_BYTES)
        if d.unconsumed_tail:
            raise BadInput(f"the link's {what} unpacks to more than {URL_BLOB_MAX_BYTES:,} bytes")
        return check_text(json.loads(raw.decode("utf-8")), f"the link's {what}")
    except BadInput:
        raise
    except (binascii.Error, zlib.error, UnicodeDecodeError, ValueError, RecursionError):
        raise BadInput(f"the link's {what} is not valid (it was cut short or changed)") from None
