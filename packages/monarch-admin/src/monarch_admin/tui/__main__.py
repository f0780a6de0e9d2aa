"""``python -m monarch_admin.tui``: the same as the ``monarch-tui`` command."""

import sys

from ._cli import main

sys.exit(main())
