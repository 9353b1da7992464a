"""Countersign's agent SDK (``countersign.sdk``) and the wire and contract it shares with the hub.

The shared part is ``countersign.protocol``.
"""
