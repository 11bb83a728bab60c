"""The JSON Schemas of the notification payloads (data files, made by
``tools/gen-notification-schemas``); a package so that they install with
the code."""
