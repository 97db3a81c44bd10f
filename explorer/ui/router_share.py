"""The router page's "Share this setup": the setup in the page's address and as a fleet file."""

from __future__ import annotations

import streamlit as st

from explorer.errors import BadInput
from explorer.router.config import FleetConfig
from explorer.router.share import encode_share
from explorer.ui.text import info


def share(cfg: FleetConfig) -> None:
    with st.expander("Share this setup"):
        try:
            token = encode_share(cfg)
        except BadInput as e:
            info(str(e))
            if "fleet" in st.query_params:
                del st.query_params["fleet"]
        else:
            if st.query_params.get("fleet") != token:
                st.query_params["fleet"] = token
            st.caption("The page's address now carries this setup (?fleet=...); copy it from the browser.")
            st.code(f"?fleet={token}", language=None, wrap_lines=True)
        st.download_button(
            "Download the fleet file",
            cfg.to_toml().encode(),
            file_name="fleet.toml",
            mime="application/toml",
            key="router_download",
        )
