"""Real drift: reading OpenAPI descriptions (``openapi_spec``), their changes between versions
(``openapi_changes``), a git history turned into a change-event log (``openapi_ingest``), the
log's format (``change_events``) and episodes cut from it (``episodes``)."""
