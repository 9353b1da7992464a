"""What a person's message asks of a demo agent: a build, an environment, a recipient, a subject, paths.

No LLM: plain patterns over the last user message, each with the demo's old fixed value as the fallback.
"""

from __future__ import annotations

import re

ADDRESS = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
BUILD = re.compile(r"\bbuild\s*(?:number\s*)?#?\s*(\d{1,9})\b|#(\d{1,9})\b", re.IGNORECASE)
ENVIRONMENTS = {"production": "production", "prod": "production", "staging": "staging", "stage": "staging",
                "development": "development", "dev": "development", "qa": "qa", "test": "test", "preview": "preview"}
ENVIRONMENT = re.compile(r"\b(" + "|".join(ENVIRONMENTS) + r")\b", re.IGNORECASE)
# "subject: Launch day", "with subject 'Launch day'", "titled Launch day", "about the launch".
SUBJECT = re.compile(r"\b(?:subject(?:\s+line)?|titled|title)\s*[:=]?\s*[\"'“‘]?([^\"'”’\n]+?)[\"'”’]?"
                     r"\s*(?:$|[\n.!?;]|,?\s+saying\b)", re.IGNORECASE)
ABOUT = re.compile(r"\babout\s+(?:the\s+)?([^\n.!?;,]+?)\s*(?:$|[\n.!?;,]|\s+saying\b)", re.IGNORECASE)
SAYING = re.compile(r"\b(?:saying|body)\s*[:=]?\s*[\"'“]?", re.IGNORECASE)
PATH = re.compile(r"(?<![\w@.:/])(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]*)*")
#: Bounds on what a message can make a demo agent ask about: patterns read only its start.
SCANNED = 2_000
MOST_PATHS = 20
LONGEST = 200


def last_user_text(ctx) -> str:
    for message in reversed(ctx.messages):
        if getattr(message, "role", None) == "user" and isinstance(message.content, str):
            return message.content
    return ""


def build(text: str, default: int) -> int:
    found = BUILD.search(text[:SCANNED])
    return int(found.group(1) or found.group(2)) if found else default


def environment(text: str, default: str) -> str:
    found = ENVIRONMENT.search(text[:SCANNED])
    return ENVIRONMENTS[found.group(1).lower()] if found else default


def recipient(text: str, default: str) -> str:
    found = ADDRESS.search(text[:SCANNED])
    return found.group(0) if found else default


def subject(text: str, default: str) -> str:
    found = SUBJECT.search(text[:SCANNED]) or ABOUT.search(text[:SCANNED])
    if not found or not found.group(1).strip():
        return default
    words = found.group(1).strip()[:LONGEST]
    return words[0].upper() + words[1:]


def body(text: str, default: str) -> str:
    found = SAYING.search(text[:SCANNED])
    said = text[found.end():].strip().rstrip("\"'”").strip() if found else ""
    return said or text or default


def paths(text: str) -> list[str]:
    """The paths the message names, in order, each once."""
    return list(dict.fromkeys(match.group(0).rstrip(".,;:") for match in PATH.finditer(text[:SCANNED])))[:MOST_PATHS]
