"""mha-viz: streamlit run app.py"""
from mha_viz.app import main

main()
