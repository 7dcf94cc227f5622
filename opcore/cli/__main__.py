"""``python -m opcore.cli``: the same as the ``opcore`` command."""

import sys

from opcore.cli import main

sys.exit(main())
