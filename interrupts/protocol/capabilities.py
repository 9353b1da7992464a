"""An agent's declared ``humanInTheLoop`` capability (AG-UI 1.0 AgentCapabilities), read as 1.0 says.

C70: an omitted field is "not declared", never "unsupported"; only an
explicit ``false`` says unsupported. C73: a declaration that fails
validation (a string where a boolean belongs) is not used, and says why;
unrecognised members are no reason to refuse it, and the stored JSON keeps
them (C72). C71: declarations inform, the stream decides: nothing here
gates a run. C74: every field is an optional boolean.

Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The ``humanInTheLoop`` fields of AG-UI 1.0 (C74), with what each declares, in plain words.
HUMAN_IN_THE_LOOP = (
    ("supported", "a person in the loop"),
    ("approvals", "pauses for approval"),
    ("interrupts", "interrupt outcomes and resumes"),
    ("approveWithEdits", "approval with edited arguments"),
    ("interventions", "a person changing the plan mid-run"),
    ("feedback", "feedback within the session"),
)


@dataclass(frozen=True)
class Declared:
    """What an agent declared: ``fields`` name -> True/False/None (not declared), or ``unused`` saying why not."""

    fields: tuple[tuple[str, str, bool | None], ...] = ()
    unused: str = ""
    unknown: tuple[str, ...] = ()

    @property
    def declared(self) -> bool:
        return any(value is not None for _name, _words, value in self.fields)

    def words(self) -> str:
        """The declaration in one plain sentence."""
        if self.unused:
            return f"Its human-in-the-loop declaration is not used: {self.unused}"
        if not self.declared:
            return "Human in the loop: not declared"
        said = []
        for verdict, value in (("supports", True), ("does not support", False)):
            named = [words for _name, words, v in self.fields if v is value]
            if named:
                said.append(f"{verdict} {', '.join(named)}")
        undeclared = [words for _name, words, v in self.fields if v is None]
        if undeclared:
            said.append(f"not declared: {', '.join(undeclared)}")
        return "Declares it " + "; ".join(said)


#: Longest key named back from an agent's declaration, and how many such keys are named.
MAX_KEY_CHARS = 60
MAX_KEYS_NAMED = 10


def human_in_the_loop(capabilities: object) -> Declared:
    """The ``humanInTheLoop`` group of an agent's capabilities JSON, as 1.0 says to read it."""
    group = capabilities.get("humanInTheLoop") if isinstance(capabilities, dict) else None
    if group is None:
        return Declared(fields=tuple((name, words, None) for name, words in HUMAN_IN_THE_LOOP))
    if not isinstance(group, dict):
        return Declared(unused=f"it is {_kind(group)} where an object of true/false fields belongs.")
    for name, _words in HUMAN_IN_THE_LOOP:
        if name in group and group[name] is not None and not isinstance(group[name], bool):
            return Declared(unused=f"“{name}” is {_kind(group[name])} where true or false belongs.")
    known = {name for name, _words in HUMAN_IN_THE_LOOP}
    unknown = tuple(sorted(str(key)[:MAX_KEY_CHARS] for key in group if key not in known))
    if len(unknown) > MAX_KEYS_NAMED:
        unknown = (*unknown[:MAX_KEYS_NAMED], f"{len(unknown) - MAX_KEYS_NAMED} more")
    return Declared(fields=tuple((name, words, group.get(name)) for name, words in HUMAN_IN_THE_LOOP),
                    unknown=unknown)


def _kind(value: object) -> str:
    if isinstance(value, str):
        return "text"
    if isinstance(value, bool):
        return "true or false"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return "empty"


#: Where an agent declares it dedupes by runId: AgentCapabilities' ``custom`` group, this key, ``true``.
DEDUPES_RUN_ID = "dedupesRunId"


def dedupes_run_id(capabilities: object) -> bool:
    """Whether an agent declares it acts on a runId once: a request it has handled is answered, not acted on again.

    Only an explicit ``true`` counts (C70: anything else is "not declared").
    The outbox then re-sends a resume whose answer was lost (``streaming.recover``).
    """
    group = capabilities.get("custom") if isinstance(capabilities, dict) else None
    return isinstance(group, dict) and group.get(DEDUPES_RUN_ID) is True
