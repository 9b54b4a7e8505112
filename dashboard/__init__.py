"""Streamlit dashboard over analyzers and tuner results."""
