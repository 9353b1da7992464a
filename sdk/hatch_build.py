"""Maps the app's interrupts/sdk and interrupts/protocol into the package as countersign.sdk and countersign.protocol.

From a checkout they are read where they are, so the hub and the SDK keep one
copy of the source. An sdist holds them already mapped, and builds its wheel from them.
"""

from pathlib import Path

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class CustomBuildHook(BuildHookInterface):
    def initialize(self, version, build_data):
        if version == "editable":
            # An editable install would put sdk/ on sys.path, where countersign/ holds neither subpackage.
            raise RuntimeError("countersign-sdk has no editable install: `pip install ./sdk` again after a change, "
                               "or work on interrupts/sdk in the app, where it imports as interrupts.sdk.")
        root = Path(self.root)
        for name in ("sdk", "protocol"):
            if not (root / "countersign" / name).is_dir():
                build_data["force_include"][str(root.parent / "interrupts" / name)] = f"countersign/{name}"
