"""Read-only predicates and words that the hub (writes) and the reads share: no writes here."""
