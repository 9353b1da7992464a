"""What every CSV the pages export shares: cells a spreadsheet will not run as formulas."""

from __future__ import annotations


def csv_safe(value):
    """``value`` for a CSV cell: text starting with = + - @ (or a tab or CR) is quoted with a leading '."""
    # A cell starting with = + - @ runs as a formula in spreadsheets: agent text must not.
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value
