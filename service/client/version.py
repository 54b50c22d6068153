"""ragserve's version, one number for both distributions: ``ragserve`` (pyproject.toml) and ``ragserve-client``
(service/client/pyproject.toml) read it from here, so a client and the server it was released with agree."""

VERSION = "0.1.0"
