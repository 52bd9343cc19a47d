"""What a run remembers: the step-by-step trace and the invariant violations it found."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Event:
    step: int
    text: str
    subjects: frozenset[str]


@dataclass(frozen=True, slots=True)
class Violation:
    step: int
    invariant: str
    detail: str
    subjects: frozenset[str]

    def line(self) -> str:
        return f"step {self.step}: {self.invariant}: {self.detail}"


@dataclass
class Recorder:
    """The trace (every step's actions and answers) and the violations, in order."""

    step: int = 0
    events: list[Event] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)

    def note(self, text: str, *subjects: str) -> None:
        self.events.append(Event(self.step, text, frozenset(s for s in subjects if s)))

    def violate(self, invariant: str, detail: str, *subjects: str) -> None:
        subject_set = frozenset(s for s in subjects if s)
        self.violations.append(Violation(self.step, invariant, detail, subject_set))
        self.note(f"VIOLATION {invariant}: {detail}", *subject_set)

    def lines(self) -> list[str]:
        return [f"{e.step:>5} {e.text}" for e in self.events]

    def minimal_trace(self, violation: Violation, *, tail: int = 8) -> list[str]:
        """The events that touch the violation's subjects, plus the last few events before it."""
        related = [
            e for e in self.events if e.step <= violation.step and (e.subjects & violation.subjects)
        ]
        before = [e for e in self.events if e.step <= violation.step][-tail:]
        chosen = sorted({id(e): e for e in [*related, *before]}.values(), key=self.events.index)
        return [f"{e.step:>5} {e.text}" for e in chosen]
