"""`python -m server` is the `eventq` command."""

import sys

from server.admin.cli import main

sys.exit(main())
