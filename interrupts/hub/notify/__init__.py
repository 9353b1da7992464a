"""Telling people: signed webhooks and emails, queued in the change they report, sent by the supervisor."""
