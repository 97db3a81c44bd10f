"""Streamlit page scripts, registered by path with st.navigation in app.py; each runs its render() when shown."""
