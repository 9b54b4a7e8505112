"""The dashboard's pages, one module each, run by `dashboard/app.py` through st.navigation."""
