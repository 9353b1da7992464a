"""Refusals of the hub itself (beyond the interrupt contract), with the HTTP status each maps to."""

from ..protocol.errors import ContractViolation, ProtocolError


class Refusal(ProtocolError):
    """A request Countersign will not carry out: a code, a sentence, and an HTTP status."""

    def __init__(self, code: str, message: str, status: int = 409, **details) -> None:
        super().__init__(code, message, **details)
        self.status = status


# The contract's refusals, as HTTP statuses: a conflict with the thread's state
# is 409; an answer of the wrong shape is 400.
CONTRACT_STATUS = {
    "PENDING_INTERRUPTS": 409,
    "ALREADY_RESOLVED": 409,
    "NOTHING_TO_RESUME": 409,
    "INCOMPLETE_RESUME": 409,
    "EXPIRED": 409,
    "INVALID_EXPIRY": 409,
    "THREAD_MISMATCH": 409,
    # Too many costly answers are being checked at once: try again shortly.
    "BUSY": 503,
}


def http_status(problem: ProtocolError) -> int:
    """The HTTP status an API answers a refusal with."""
    if isinstance(problem, Refusal):
        return problem.status
    if isinstance(problem, ContractViolation):
        return CONTRACT_STATUS.get(problem.code, 400)
    return 400
