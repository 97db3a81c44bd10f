"""Figure and HTML builders for the explorer's panels: pure functions of a trace step.

Nothing here calls Streamlit, so every builder can be tested (and benchmarked) on its own.
"""
