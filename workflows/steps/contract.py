"""Names of the shared document steps (``extract_text``, ``store_document``) that live
histories and other tools rely on.

Like ``workflows.contract``, these never change once released: an activity renamed under a
running workflow breaks it.
"""

from __future__ import annotations

from typing import Final

ACTIVITY_EXTRACT_TEXT: Final = "extract_text"
ACTIVITY_STORE_DOCUMENT: Final = "store_document"
# How a PDF starts: a document that does is a PDF, any other is UTF-8 text.
PDF_SIGNATURE: Final = b"%PDF-"

# Stable ApplicationError type names (wire contract: never rename).
# The document is neither UTF-8 text nor a readable PDF with text (encrypted, broken, scanned
# images only): permanent, the message says which in one line and quotes nothing of the document.
DOCUMENT_UNREADABLE: Final = "DocumentUnreadable"
# The document passes a limit of the operator's (MAX_PDF_PAGES, MAX_DOCUMENT_CHARS, or the
# memory or CPU its extraction may take): permanent, the message names the limit.
DOCUMENT_TOO_LARGE: Final = "DocumentTooLarge"
# A reference read again (for the analysis) no longer holds the text that was extracted.
DOCUMENT_CHANGED: Final = "DocumentChanged"
# The SQL store could not be reached or was busy (connection refused, timeout, locked,
# authentication an operator can fix): retried.
DOCUMENT_STORE_UNAVAILABLE: Final = "DocumentStoreUnavailable"
# The store refused the row for good (integrity or data error, a documents table of another
# shape): permanent.
DOCUMENT_STORE_REJECTED: Final = "DocumentStoreRejected"
# The request id's row was written by another run chain (a reused id, another pipeline, another
# tenant): it is left as it was, and this run's fields are not stored. Permanent.
DOCUMENT_STORE_CONFLICT: Final = "DocumentStoreConflict"
