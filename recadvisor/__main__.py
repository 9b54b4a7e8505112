"""`python -m recadvisor`: the same as the `recadvisor` console script."""

from recadvisor.cli import entry

if __name__ == "__main__":
    entry()
