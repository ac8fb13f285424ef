"""A run's JSONL transcript: written line by line as items are committed, and read back to resume from."""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
import warnings
from pathlib import Path
from typing import IO, Any

from ..events import (
    ApprovalAsked,
    ApprovalDecided,
    ClientSeen,
    ContextCompacted,
    Event,
    ItemCommitted,
    RunFinished,
    RunStarted,
    UsageUpdated,
)
from ..record.history import Item, repair_history
from ..record.images import image_reference
from ..secrets import redact
from ..text import json_line

KEEP = 200
"""How many runs' transcripts a folder keeps: a run starting in it removes the oldest beyond these."""
RUN_FILE = re.compile(r"\d{8}-\d{6}-[0-9a-f]{12}\.jsonl")
"""The name of a transcript :func:`run_transcript` named: other files in the folder are never removed."""


def transcript_dir() -> Path:
    """Where run transcripts go unless a run says otherwise (``AGENTKERNEL_TRANSCRIPTS`` overrides)."""
    return Path(os.environ.get("AGENTKERNEL_TRANSCRIPTS", "~/.agentkernel/transcripts")).expanduser()


def run_transcript(folder: str | os.PathLike[str], run_id: str, keep: int = KEEP) -> Path:
    """The path of run ``run_id``'s transcript in ``folder`` (named by the time and the run), after removing the
    oldest run transcripts there beyond the newest ``keep - 1``, so the folder holds at most ``keep`` with this one.
    Only files named as this function names them are removed; one that cannot be removed is left."""
    folder = Path(folder).expanduser()
    with contextlib.suppress(OSError):  # a folder not made yet holds nothing to remove
        runs = sorted(p for p in folder.iterdir() if RUN_FILE.fullmatch(p.name))  # the name starts with the time
        for old in runs[:max(len(runs) - keep + 1, 0)]:
            with contextlib.suppress(OSError):
                old.unlink()
    return folder / f"{time.strftime('%Y%m%d-%H%M%S')}-{run_id}.jsonl"


def open_transcript(transcript: str | os.PathLike[str] | bool, run_id: str) -> Transcript | None:
    """A run's transcript as ``AgentLoop(transcript=...)`` names it: a JSONL file to append to, an existing folder (or
    True: :func:`transcript_dir`) to write a new file in (:func:`run_transcript`), or False for none."""
    if transcript is True or transcript and os.path.isdir(transcript):  # a folder: a new file there
        transcript = run_transcript(transcript_dir() if transcript is True else transcript, run_id)
    return Transcript(transcript) if transcript else None


class Transcript:
    """Appends a run's items to a JSONL file as they are committed, flushing each line: a listener of the loop's
    events (:mod:`agentkernel.events`), which reach it redacted like every other listener's.

    Lines are ``{"event": "item", "item": {...}}``, with one ``{"event": "start", ...}`` first and one
    ``{"event": "finish", ...}`` last (with the run's ``usage`` sums), and a ``{"event": "usage", ...}`` for each
    response's tokens, and a line for each approval (``approval_asked``, ``approval``), so a kernel that dies loses
    nothing committed before it died. A served session's transcript has a ``{"event": "client", ...}`` line for each
    new client and its ``served`` tools in the start line. A tool
    output's images are written as references (type, size, bytes, sha256; see
    :func:`~agentkernel.record.images.image_reference`), not their data. Text that UTF-8 cannot encode (lone surrogates)
    is written as JSON escapes. No value of the kernel's secret set is written: each is its marker
    (see :mod:`agentkernel.secrets`): the loop's :class:`~agentkernel.events.Listeners` redact every event before
    any listener hears it, and :meth:`write` redacts what it is given again. A write that fails (a full disk, a
    removed directory) warns once and ends the transcript, never the run; ``error`` says why.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self.error: str | None = None
        self.run_id = ""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")
        if _ends_mid_line(self.path):  # an earlier run died mid-write: keep this run's first record whole
            self._file.write("\n")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is None:
            return
        try:
            self._file.write(json_line(redact(record)) + "\n")
            self._file.flush()
        except (OSError, ValueError) as e:  # ValueError: a value JSON cannot hold
            self.error = f"cannot write the transcript {self.path}: {e}"
            warnings.warn(f"{self.error}; the run goes on without it", RuntimeWarning, stacklevel=2)
            self.close()

    def __call__(self, event: Event) -> None:
        """Hear one of the loop's events: the run's start (and the history it starts from), each committed item,
        each response's usage, each approval asked and decided, each compaction, and the run's end (which closes the
        file)."""
        if isinstance(event, ItemCommitted):
            self.item(event.item)
        elif isinstance(event, ApprovalAsked):
            self.write({"event": "approval_asked", "call_id": event.call.call_id, "tool": event.call.name})
        elif isinstance(event, ApprovalDecided):
            self.write({"event": "approval", "call_id": event.call.call_id, "tool": event.call.name,
                        "approved": event.approved, "by": event.by, "waited": round(event.waited, 3),
                        **{k: v for k, v in (("for_run", event.for_run), ("note", event.note),
                                             ("reason", event.reason), ("stopped", event.stopped)) if v}})
        elif isinstance(event, UsageUpdated) and event.response is not None:
            self.write({"event": "usage", **{k: v for k, v in vars(event.response).items() if v}})
        elif isinstance(event, RunStarted):
            self.run_id = event.run_id
            self.write({"event": "start", "run_id": event.run_id, "system": event.system, **event.briefing})
            for item in event.history:
                self.item(item)
        elif isinstance(event, ContextCompacted):
            self.write({"event": "compaction", **event.compaction.record()})
        elif isinstance(event, ClientSeen):
            self.write({"event": "client", "run_id": self.run_id, "client": event.client})
        elif isinstance(event, RunFinished):
            result = event.result
            self.write({"event": "finish", "status": result.status, "detail": result.detail,
                        "usage": vars(result.usage).copy()})
            self.close()

    def item(self, item: Item) -> None:
        if isinstance(item.get("images"), list):  # a reference per image, not megabytes of base64
            item = {**item, "images": [image_reference(image) for image in item["images"]]}
        self.write({"event": "item", "item": item})

    def close(self) -> None:
        if self._file is not None:
            file, self._file = self._file, None
            with contextlib.suppress(OSError):  # a full disk fails the final flush too: already reported
                file.close()


def _ends_mid_line(path: Path) -> bool:
    with path.open("rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


def load_transcript(path: str | os.PathLike[str]) -> list[Item]:
    """Read the items of a transcript back as a repaired history, ready to resume from.

    A file that several runs appended to gives the last run's history (each run's ``start`` record is
    followed by the whole history it began from). A torn line (the kernel died mid-write) is skipped. Image
    references are dropped (the transcript never held the images).
    """
    items: list[Item] = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():  # may end mid-character
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):  # a torn line can still parse, e.g. as a number
            continue
        if record.get("event") == "start":
            items = []
        elif record.get("event") == "item" and isinstance(record.get("item"), dict):
            items.append(_without_references(record["item"]))
    return repair_history(items)


def _without_references(item: Item) -> Item:
    """The item without the image references a transcript holds instead of images: a resumed run's model is not
    sent them again (the output's text still says what they were)."""
    return {k: v for k, v in item.items() if k != "images"} if "images" in item else item
