"""The document pipeline's activities: text extraction (``extract``; a PDF's in a limited child
process, ``child`` and ``pdf_text``, its text kept by content hash in ``text_store``) and the SQL
store of the extracted fields (``store``). Each owns its client, timeouts and error mapping; the
worker builds them and injects them."""
