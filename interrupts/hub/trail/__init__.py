"""The hash-chained audit trail; docs/internals/trail.md maps its modules."""
