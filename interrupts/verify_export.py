"""Check an exported audit trail offline: ``python -m interrupts.verify_export countersign-audit.json``.

No Django, no database, no network: the file alone (``protocol.trail``
says what is checked, and holds the command: the SDK's wheel runs it as
``python -m countersign.protocol.trail``). Exit status 0 when it verifies,
1 when it does not, 2 when the file cannot be read.
"""

import sys

from .protocol.trail import main

if __name__ == "__main__":
    sys.exit(main())
