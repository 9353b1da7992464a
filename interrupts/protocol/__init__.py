"""The AG-UI wire format and the interrupt contract, in pure Python.

Nothing in this package imports Django, Channels or an HTTP client: given
bytes, events and inputs it returns results or raises a ``ProtocolError``, so
the same checks serve the inbox, the REST API and the AG-UI gateway.
"""
