"""Progress while a benchmark runs: one rich progress display, phases as tasks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)


class Phase:
    def __init__(self, progress: Progress, task: TaskID) -> None:
        self._progress = progress
        self._task = task

    def update(self, completed: float | None = None, *, total: float | None = None,
               note: str | None = None) -> None:  # fmt: skip
        fields = {} if note is None else {"note": note}
        self._progress.update(self._task, completed=completed, total=total, **fields)


class BenchUI:
    """`with ui.phase("onboarding", total=n) as phase: phase.update(k)`; `ui.say(text)`."""

    def __init__(self) -> None:
        self.console = Console(stderr=False, highlight=False)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=30),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[note]}"),
            console=self.console,
            transient=False,
            refresh_per_second=4,
        )
        self.started = time.monotonic()

    def __enter__(self) -> BenchUI:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def say(self, text: str) -> None:
        self.progress.console.print(text)

    @contextmanager
    def phase(self, description: str, total: float | None = None) -> Iterator[Phase]:
        task = self.progress.add_task(description, total=total, note="")
        try:
            yield Phase(self.progress, task)
        finally:
            current = self.progress.tasks[task] if task < len(self.progress.tasks) else None
            if current is not None and current.total is None:
                self.progress.update(task, total=max(current.completed, 1),
                                     completed=max(current.completed, 1))  # fmt: skip
            self.progress.stop_task(task)
