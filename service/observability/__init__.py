"""Logs with a request id on every line (:mod:`.context`, :mod:`.logs`, :mod:`.requests`) and OpenTelemetry
traces with a span per stage (:mod:`.tracing`)."""
