"""Streamlit components drawn in the browser (st.components.v2, inline html/css/js, no build step)."""
