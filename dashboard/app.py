"""The Streamlit entry point: `recadvisor dashboard` runs `streamlit run dashboard/app.py`."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

VIEWS = Path(__file__).parent / "views"
# (file, title, Material icon); the first is the default page, served at "/".
PAGES = [
    ("runs", "Runs", "folder_open"),
    ("diagnosis", "Diagnosis", "troubleshoot"),
    ("compare", "Compare", "compare_arrows"),
    ("tuning", "Tuning", "tune"),
]

st.set_page_config(page_title="recadvisor", page_icon=":material/insights:", layout="wide")
pages = [st.Page(VIEWS / f"{name}.py", title=title, icon=f":material/{icon}:", url_path=name,
                 default=i == 0) for i, (name, title, icon) in enumerate(PAGES)]
st.navigation(pages).run()
