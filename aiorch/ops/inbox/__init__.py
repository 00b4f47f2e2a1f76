"""The review inbox: a web page where reviewers see the runs waiting for them and decide.

``app`` (pages and actions), ``auth`` (who is reviewing, CSRF), ``runs`` (what Temporal says
about the waiting runs), ``server`` (``python -m aiorch.ops.inbox``; ``run`` is what the CLI's
``aiorch inbox`` calls), ``templates/`` and ``static/``. See README, "Review inbox".
"""

from __future__ import annotations

from aiorch.ops.inbox.server import READY_LINE, main, run

__all__ = ["READY_LINE", "main", "run"]
