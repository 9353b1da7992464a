"""Every bound on a responseSchema and on the work of validating an answer against it.

The measurements behind each number: docs/internals/schema.md ("Limits").
"""

from __future__ import annotations

#: Largest responseSchema accepted, as compact UTF-8 JSON: keeps the metaschema
#: check of a schema never seen before near 150 ms.
MAX_SCHEMA_BYTES = 64 * 1024
#: Deepest nesting of JSON containers (the root is level 1): ~32 levels of
#: nested objects, far from Python's recursion limit in every recursive walk.
MAX_SCHEMA_DEPTH = 64
#: Steps one validation of one answer may take: the worst shapes stay near 90 ms.
MAX_VALIDATION_STEPS = 80_000
#: Longest pattern compiled, and most pattern text one schema may carry:
#: RE2 runs in linear time, but compiling a case-folded class is not cheap.
MAX_PATTERN_CHARS = 1_000
MAX_SCHEMA_PATTERN_CHARS = 2_000
#: Steps a ``regex``-format answer is charged per character before RE2
#: compiles it, so a long one is checked in the worker process.
REGEX_STEPS_PER_CHAR = 30
#: RE2's memory per compiled pattern; a pattern that needs more is UNSAFE_PATTERN.
MAX_PATTERN_MEMORY = 2 * 1024 * 1024
#: Steps an answer may take in the server's own interpreter (~5 ms) before it
#: is checked again, with the full budget, in the worker process.
FAST_VALIDATION_STEPS = 5_000
#: How long an answer waits for its turn in the worker before ``BUSY``.
COSTLY_WAIT_SECONDS = 10.0
#: Steps charged for each descent into a sub-schema, ~4 plain keywords' time.
DESCEND_STEPS = 4
#: A string costs one step per this many characters where a keyword reads it through.
CHARS_PER_STEP = 256
