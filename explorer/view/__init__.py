"""What is drawn, from a trace: explanations, state views, history, lesson checks and the stage's steps (no Streamlit)."""
