"""Streamlit page scripts, registered by path with st.navigation; each ends by calling its render()."""
