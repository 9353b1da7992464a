"""An interrupt's ``responseSchema``: bounded checks of an untrusted schema, answers validated against it, edits.

Why each piece is shaped as it is: docs/internals/schema.md.
"""
