"""`python -m server` is the `eventq` command."""

import sys

from server.cli import main

sys.exit(main())
