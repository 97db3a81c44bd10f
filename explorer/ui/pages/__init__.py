"""The Streamlit pages, one script per page; each draws itself when Streamlit runs it."""
