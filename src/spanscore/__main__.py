"""`python -m spanscore run|validate`: the same command line as the `spanscore` script."""

import sys

from spanscore.cli import main

sys.exit(main())
