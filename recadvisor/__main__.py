import sys

from recadvisor.cli import main

sys.exit(main())
