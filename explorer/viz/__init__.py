"""Figure and HTML builders for the explorer's panels: pure functions of a trace step, no Streamlit."""
