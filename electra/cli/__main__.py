"""`python -m electra.cli ARGS`, as torchrun starts each process: `electra ARGS`."""

import sys

from electra.cli import main

if __name__ == "__main__":  # not in a process multiprocessing spawns from this one
    sys.exit(main())
