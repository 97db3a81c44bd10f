"""The Streamlit pages: one file a page, registered by path with st.navigation in app.py."""
