"""The Streamlit side of the explorer: page scripts in pages/, and the modules that draw them (no engine logic)."""
