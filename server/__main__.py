"""`python -m server` is the `eventq` command."""

import sys

from server.admin.entry import main

sys.exit(main())
