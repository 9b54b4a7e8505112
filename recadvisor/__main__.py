"""`python -m recadvisor`: the same as the `recadvisor` console script."""

import sys

from recadvisor.cli import main

if __name__ == "__main__":
    sys.exit(main())
