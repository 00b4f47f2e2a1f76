"""``python -m aiorch.ops.inbox``: see ``aiorch.ops.inbox.server``."""

from __future__ import annotations

import sys

from aiorch.ops.inbox.server import main

if __name__ == "__main__":
    sys.exit(main())
