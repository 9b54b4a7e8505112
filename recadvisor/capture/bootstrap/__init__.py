"""The folder `recadvisor capture` puts first on the command's PYTHONPATH (see sitecustomize.py).

A package only so that installs ship it; nothing imports it.
"""
