"""Streamlit pages of the Prefix Cache Explorer; each page module has a `render()`."""
