"""`python -m electra.cli ARGS`, as torchrun starts each process: `electra ARGS`."""

import sys

from electra.cli import main

sys.exit(main())
