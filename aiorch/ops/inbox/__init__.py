"""The review inbox: a web page where reviewers see the runs waiting for them and decide.

``app`` (routes and actions), ``pages`` (rendering, error pages), ``forms`` (what a form
posts), ``correction_form``, ``correction_reading`` and ``correction_pages`` (correcting a run's
fields through a form built from their schema, with a preview), ``headers`` (security headers),
``auth`` (who is reviewing, CSRF), ``runs`` (what Temporal says about the waiting runs),
``run_requests`` (a run's request: the list's summary, the schema of its fields), ``server``
(configuring and serving it: ``aiorch inbox serve``), ``templates/`` and ``static/``. See
README, "Review inbox".
"""

from __future__ import annotations

from aiorch.ops.inbox.server import READY_LINE, build_app, credentials, serve

__all__ = ["READY_LINE", "build_app", "credentials", "serve"]
