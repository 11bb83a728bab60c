"""Versioned notifications: what Cyborg tells the rest of the cloud.

``notifier`` sends them through oslo.messaging, ``payloads`` describes
what they carry (and their JSON Schemas, in ``schemas/``), ``emit`` has
one function per event for the services to call.
"""
