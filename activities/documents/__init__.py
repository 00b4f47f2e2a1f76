"""The document pipeline's activities: text extraction (``extract``) and the SQL store of the
extracted fields (``store``). Each owns its client, timeouts and error mapping; the worker
builds them and injects them."""
