"""Share links: a fleet config as a URL-safe token (``v1.`` + base64url of zlib'd canonical
TOML), capped both ways, and only ever decompressed (capped) and parsed as TOML on the way back."""

from __future__ import annotations

import base64
import binascii
import zlib

from explorer.errors import BadInput
from explorer.router.config import LIMITS, MAX_TOML_BYTES, FleetConfig, Limits
from explorer.router.fleet_file import parse_fleet_text

MAX_SHARE_CHARS = 6000  # the longest share link payload we write or read
SHARE_PREFIX = "v1."


def encode_share(cfg: FleetConfig) -> str:
    """A URL-safe token for a config (``v1.`` + base64url of zlib'd TOML); BadInput when it
    would be longer than `MAX_SHARE_CHARS` (long explicit prompts)."""
    raw = zlib.compress(cfg.to_toml().encode("utf-8"), 9)
    token = SHARE_PREFIX + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
    if len(token) > MAX_SHARE_CHARS:
        raise BadInput(
            f"this setup needs a {len(token):,}-character link, more than {MAX_SHARE_CHARS:,}: "
            "shorten the system prompts (or share the TOML file)"
        )
    return token


def decode_share(token: str, limits: Limits = LIMITS) -> FleetConfig:
    """The config in a share token; `BadInput` for anything that is not one. The payload is
    only ever decompressed (capped) and parsed as TOML."""
    if not isinstance(token, str) or not token.startswith(SHARE_PREFIX):
        raise BadInput("shared fleet link: not a fleet token (expected it to start with 'v1.')")
    body = token[len(SHARE_PREFIX) :]
    if len(token) > MAX_SHARE_CHARS:
        raise BadInput(f"shared fleet link: {len(token):,} characters, more than {MAX_SHARE_CHARS:,}")
    if not body or any(c not in _B64URL for c in body):
        raise BadInput("shared fleet link: not base64url text")
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))
    except (binascii.Error, ValueError):
        raise BadInput("shared fleet link: not base64url text") from None
    d = zlib.decompressobj()
    try:
        data = d.decompress(raw, MAX_TOML_BYTES + 1)
    except zlib.error:
        raise BadInput("shared fleet link: damaged (not zlib data)") from None
    if len(data) > MAX_TOML_BYTES or d.unconsumed_tail:
        raise BadInput(f"shared fleet link: unpacks to more than {MAX_TOML_BYTES:,} bytes")
    if not d.eof:
        raise BadInput("shared fleet link: damaged (truncated)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput("shared fleet link: damaged (not UTF-8)") from None
    return parse_fleet_text(text, "shared fleet link", limits)


_B64URL = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
