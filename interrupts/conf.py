"""Every COUNTERSIGN_* default and every limit, defined once (filled in below)."""
