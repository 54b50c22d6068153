"""References generated from the code, committed under ``docs/``, each held fresh by a test:

- ``docs/api.md`` from the OpenAPI document of a default deployment (:mod:`service.docs.api_reference`);
- ``docs/configuration.md`` from the settings class (:mod:`service.docs.configuration`).

``python -m service.docs`` rewrites both; ``python -m service.docs --check`` only says whether they are stale.
"""
