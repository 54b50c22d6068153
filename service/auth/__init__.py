"""API keys: who a request is (:mod:`.keys`, :mod:`.keyring`) and what it may do (:mod:`.principal`, :mod:`.policy`)."""
