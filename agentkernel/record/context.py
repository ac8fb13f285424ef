"""What the model is sent: a view of the run's full history, compacted when it outgrows the context window.

The full history (``AgentLoop.history``) is the record and is never changed; :class:`ContextView` holds what a
request carries. The view grows by the same appends as the history, so between compactions every request extends
the one before it (a server's prompt cache keeps hitting, and the adapters convert only what is new). When the fill
passes the high-water mark, :meth:`ContextView.compact` brings it down to the low-water mark in one batch, in stages:

1. **Old tool outputs are elided**, oldest first: each becomes a placeholder naming the call, its size and how to
   get the text back. Outputs the model has not answered yet are never elided, and a call never loses its output.
2. **Only when that is not enough, older turns are summarised** by the model into one note (the task in the user's
   words, what was done and found, what is left); user messages are kept verbatim. A summary that fails or does
   not shrink the context is replaced by the runtime's own note listing the calls that were made.

The fill is the last response's reported input tokens plus an estimate (characters / 4, scaled by how the server's
counts compared with the estimates so far) of what was added since.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..text import short, short_arguments
from .history import Item, user_message

UNCOUNTED_MARGIN = 1.5
"""How many more tokens than characters / 4 the cost budget allows for before the server has counted a request, and
an estimated response is counted with (characters / 4 undercounts JSON and code)."""

CHARS_PER_TOKEN = 4
ITEM_TOKENS = 6
"""Tokens an item costs beyond its text (role markers, call ids, JSON punctuation)."""
IMAGE_TOKENS = 800
"""What one image is estimated to cost (OpenAI counts 85-1,100 tokens for an image, by size and detail)."""
MAX_IMAGES_PER_REQUEST = 4
"""A request carries at most this many images (the newest outputs'); older outputs lose theirs first."""

HIGH_WATER = 0.85
"""Compact when the fill passes this share of the usable window (the window less the room kept for the answer)."""
LOW_WATER = 0.3
"""...and bring it down to this share by eliding old outputs. The gap is what the next requests grow into without
re-cutting the prompt: the wider it is, the rarer compactions are."""
SUMMARY_WATER = 0.5
"""Summarise older turns only when eliding leaves the fill above this share. Eliding changes the prompt only from
the oldest output it replaces on (the placeholders before it stay as they were, so a server's cache keeps them); a
summary re-cuts it from the first turn on. So placeholders are left to pile up to this mark, and then a summary cuts
deep (keeping the newest turns up to half the low-water mark), so that many compactions follow before the next."""

PLACEHOLDER_CHARS = 90
"""Outputs shorter than this are never elided: a placeholder would not be shorter."""

CONTEXT_FRAME = """\
When the conversation outgrows the context window, old tool outputs are replaced by a short note that says \
which call it was and how to get the text back, and older turns may be summarised."""
"""Appended to the system prompt of a run whose view can be compacted: the model is told before it sees a note."""

SUMMARY_INSTRUCTION = """\
The conversation above is about to be cut to fit your context window. Write a note that will replace it, \
for yourself to continue from. Do not call tools. Use exactly these headings:
Task: the user's request, in the user's own words.
Done and found: the calls you made and the facts you learned, with the exact values you will need.
Left to do: what remains to answer the request.
Be brief: at most 200 words."""

NOTE_HEADER = "[Context note from agentkernel: the earlier part of this run was taken out of the context window."


def estimate(text: str) -> int:
    """Tokens in ``text`` as the view estimates them (no tokenizer: characters / 4)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def item_tokens(item: Item) -> int:
    """The estimated tokens of one history item."""
    size = ITEM_TOKENS
    for key in ("content", "output", "arguments", "name"):
        value = item.get(key)
        if isinstance(value, str):
            size += estimate(value)
        elif isinstance(value, list):  # content parts
            size += sum(estimate(str(part.get("text", ""))) for part in value if isinstance(part, dict))
    images = item.get("images")
    if isinstance(images, list):
        size += IMAGE_TOKENS * len(images)
    return size


@dataclass
class Compaction:
    """One compaction of the view: what it did, in tokens (the view's own estimates) and items."""

    reason: str
    """Why it ran: ``high water`` (the fill passed the mark) or ``overflow`` (the server refused a request)."""
    tokens_before: int
    tokens_after: int
    images_dropped: int = 0
    turns_summarised: int = 0
    summary: str = ""
    """``model`` (the model wrote the note), ``runtime`` (its summary failed or did not shrink the view) or ``""``."""
    fits: bool = True
    """Whether the view now fits the usable window; a request that still does not fit ends the run."""
    elided: list[str] = field(default_factory=list, repr=False)
    """call_ids of the outputs elided by this compaction."""

    @property
    def outputs_elided(self) -> int:
        return len(self.elided)

    def record(self) -> dict[str, Any]:
        """What a transcript keeps of it: the counts, not the call ids."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if k != "elided"}
        return {**fields, "outputs_elided": self.outputs_elided}

    @property
    def title(self) -> str:
        """``context compacted (high water): 6,100 -> 2,300 tokens, 12 outputs elided, 3 turns summarised``."""
        done = [f"{self.outputs_elided} output{'s' * (self.outputs_elided != 1)} elided"]
        if self.images_dropped:
            done.append(f"{self.images_dropped} image{'s' * (self.images_dropped != 1)} dropped")
        if self.turns_summarised:
            by = "by the model" if self.summary == "model" else "by the runtime"
            done.append(f"{self.turns_summarised} turn{'s' * (self.turns_summarised != 1)} summarised {by}")
        return (f"context compacted ({self.reason}): {self.tokens_before:,} -> {self.tokens_after:,} tokens, "
                + ", ".join(done))


Summarizer = Callable[[list[Item]], Awaitable[str | None]]
"""Asks the model for a summary of a view (which ends with the instruction); ``None`` when it could not."""


class ContextView:
    """The items a model request carries, derived from the run's full history.

    ``window`` is the model's context window in tokens (``None``: unknown, nothing is compacted until a server's
    overflow error tells it, see :meth:`learn`); ``reserve`` the tokens kept free for the answer; ``fixed`` the
    estimated tokens of what every request carries besides the items (system prompt, tool schemas).
    ``read_only(name)`` says whether a tool may be called again just to see an elided output.
    """

    def __init__(self, history: Iterable[Item], *, window: int | None = None, reserve: int | None = None,
                 fixed: int = 0, read_only: Callable[[str], bool] = lambda name: True):
        self.window = window or None
        self._reserve = reserve
        self.fixed = fixed
        self.read_only = read_only
        self.items: list[Item] = []
        self.total = 0  # estimated tokens of the items
        self.calls: dict[str, Item] = {}  # function_call items by call_id
        self.image_items: list[int] = []  # indexes of items that still carry images, oldest first
        self.images = 0  # how many images they carry
        self.ratio = 1.0  # the server's token count / the view's estimate, from the last report
        self.base: int | None = None  # input tokens reported for the last request, and the view's size then
        self.base_total = 0
        self.sent_total = 0  # the view's size when the last request was sent
        self.floor = 0  # after a compaction that could not reach the low-water mark: do not compact again at once
        for item in history:
            self.append(item)

    # -- growing with the history -----------------------------------------------------------------------------

    def append(self, item: Item) -> None:
        """Add an item the history just committed (the same dict: the view copies only what it changes)."""
        self.items.append(item)
        self.total += item_tokens(item)
        kind = item.get("type")
        if kind == "function_call":
            self.calls[item["call_id"]] = item
        elif item.get("images"):
            self.image_items.append(len(self.items) - 1)
            self.images += len(item["images"])
            if self.images > MAX_IMAGES_PER_REQUEST:
                self.items = list(self.items)  # never edit a list a request already carried
                oldest = []
                for index in self.image_items[:-1]:
                    oldest.append(index)
                    if self.images - sum(len(self.items[i]["images"]) for i in oldest) <= MAX_IMAGES_PER_REQUEST:
                        break
                self._drop_images(oldest)

    def sent(self) -> None:
        """A request carrying the view as it is now was sent (its reported input tokens come next)."""
        self.sent_total = self.total

    def observe(self, input_tokens: int) -> None:
        """The server reported ``input_tokens`` for the request last :meth:`sent`."""
        if input_tokens <= 0:
            return
        self.base, self.base_total = input_tokens, self.sent_total
        self.ratio = _ratio(input_tokens, self.fixed + self.sent_total)

    def uncounted(self, tokens: int) -> int:
        """``tokens`` as the view estimates them, with room for a tokenizer that counts more than characters / 4
        (:data:`UNCOUNTED_MARGIN`) until the server has counted a request of this view."""
        return tokens if self.base is not None else math.ceil(UNCOUNTED_MARGIN * tokens)

    def tokens_of(self, items: list[Item] | None) -> int:
        """The input tokens of a request carrying ``items`` (None: this view, as the next turn sends it) beside the
        fixed part, as the view estimates them."""
        if items is None:
            return self.fill
        return round(self.ratio * (self.fixed + sum(map(item_tokens, items))))

    # -- the fill and the marks -------------------------------------------------------------------------------

    @property
    def fill(self) -> int:
        """Tokens the next request is expected to carry: the last report plus an estimate of what came since."""
        if self.base is not None:
            return self.base + round(self.ratio * (self.total - self.base_total))
        return round(self.ratio * (self.fixed + self.total))

    @property
    def reserve(self) -> int:
        if self._reserve is not None:
            return self._reserve
        return min((self.window or 0) // 8, 2048)

    @property
    def usable(self) -> int:
        """The tokens a request may carry: the window less the room for the answer."""
        return max((self.window or 0) - self.reserve, 1)

    @property
    def high_water(self) -> int:
        return int(HIGH_WATER * self.usable)

    @property
    def low_water(self) -> int:
        return int(LOW_WATER * self.usable)

    def needs_compaction(self) -> bool:
        return self.window is not None and self.fill > max(self.high_water, self.floor)

    def learn(self, window: int | None, prompt_tokens: int | None) -> None:
        """A server refused a request as too long, saying its window and/or the request's size (either may be
        unknown): take the window, and correct the estimates by the server's own count."""
        if prompt_tokens:
            self.ratio = _ratio(prompt_tokens, self.fixed + self.total)
        if window:
            self.window = window
        else:  # no window given: it is below what was refused; assume 80% of that (the next refusal lowers it)
            guess = int(0.8 * (prompt_tokens or self.fill))
            self.window = guess if self.window is None else min(self.window, guess)
        self.base = None  # the last report was for a view that is about to change

    # -- compacting -------------------------------------------------------------------------------------------

    async def compact(self, summarize: Summarizer | None, reason: str = "high water") -> Compaction:
        """Bring the fill down to the low-water mark: elide old outputs, then (if needed) summarise older turns."""
        before = self.fill
        sent = self.items  # as the last request carried them: a summary request that starts with them is cached
        self.items = list(self.items)  # a new list: the adapters' caches see a changed history and convert afresh
        self.base = None
        compaction = Compaction(reason, before, before)
        unanswered = self._unanswered_from()
        compaction.images_dropped = self._drop_images([i for i in self.image_items if i < unanswered])
        compaction.elided = self._elide_outputs()
        if self.fill > SUMMARY_WATER * self.usable:
            await self._summarise(summarize, compaction, sent)
        compaction.tokens_after = after = self.fill
        compaction.fits = after <= self.usable
        # A compaction that left the fill high is not repeated each round (nothing new could be cut): wait until
        # the requests have grown by half the band again.
        self.floor = min(self.usable, after + (self.high_water - self.low_water) // 2)
        return compaction

    def _drop_images(self, indexes: list[int]) -> int:
        dropped = 0
        for index in indexes:
            item = self.items[index]
            images = item.get("images") or []
            if not images:
                continue
            copy = {k: v for k, v in item.items() if k != "images"}
            copy["output"] = (f"{item.get('output', '')}\n[{len(images)} image{'s' * (len(images) != 1)} of this "
                              "output no longer shown: dropped to fit the context window]")
            self._replace(index, copy)
            dropped += len(images)
        self.image_items = [i for i in self.image_items if self.items[i].get("images")]
        self.images -= dropped
        return dropped

    def _replace(self, index: int, item: Item) -> None:
        self.total += item_tokens(item) - item_tokens(self.items[index])
        self.items[index] = item

    def _unanswered_from(self) -> int:
        """The index of the first item after the model's last turn: outputs from there on are not seen yet."""
        index = len(self.items)
        while index > 0 and self.items[index - 1].get("type") == "function_call_output":
            index -= 1
        return index

    def _elide_outputs(self) -> list[str]:
        """Stage 1: replace outputs with placeholders, oldest first, until the fill is under the low-water mark."""
        elided: list[str] = []
        for index in range(self._unanswered_from()):
            if self.fill <= self.low_water:
                break
            item = self.items[index]
            if item.get("type") != "function_call_output" or item.get("elided"):
                continue
            if len(str(item.get("output", ""))) < PLACEHOLDER_CHARS:
                continue  # shorter than any placeholder
            placeholder = self.placeholder(item)
            if item_tokens(placeholder) >= item_tokens(item):
                continue  # a short output costs no more than its placeholder
            self._replace(index, placeholder)
            elided.append(item["call_id"])
        return elided

    def placeholder(self, item: Item) -> Item:
        """The output item as the view shows it once elided: what the call was, its size, how to see it again."""
        call = self.calls.get(item["call_id"], {})
        name = call.get("name", "the tool")
        arguments = short_arguments(call.get("arguments", "{}"), 120)
        size = len(str(item.get("output", "")))
        again = ("call it again to see them" if self.read_only(name) else
                 "it has side effects: do not run it again just to see them")
        text = f"[elided to fit the context window: {name}({arguments}) gave {size:,} characters; {again}]"
        return {"type": "function_call_output", "call_id": item["call_id"], "output": text, "elided": True}

    async def _summarise(self, summarize: Summarizer | None, compaction: Compaction, sent: list[Item]) -> None:
        """Stage 2: replace the older turns by one note, keeping the user messages and the newest turns.

        The model is asked to summarise the older turns as the last request carried them (``sent``, outputs in
        full where they were): that request is a prefix of this one, so a server's prompt cache still holds it.
        """
        sizes = [item_tokens(item) for item in self.items]
        split = self._split(sizes)  # eliding replaced items in place: the same indexes in ``sent``
        if split == 0:
            return
        old, kept = self.items[:split], self.items[split:]
        users = [item for item in old if item.get("role") == "user" and not item.get("compaction")]
        turns = sum(1 for item in old if item.get("type") == "function_call" or item.get("role") == "assistant")
        note, source = None, ""
        if summarize is not None:
            request = [*sent[:split], user_message(SUMMARY_INSTRUCTION)]
            # The request must fit too; and a model's note is worth asking for only if it can be shorter than
            # what it replaces.
            if self.ratio * (self.fixed + sum(map(item_tokens, request))) + self.reserve <= (self.window or 0):
                text = await summarize(request)
                if text and text.strip():
                    note, source = self.note(text.strip(), old), "model"
        users_tokens = sum(map(item_tokens, users))
        turns_tokens = sum(sizes[:split]) - users_tokens
        if note is None or item_tokens(note) >= turns_tokens:
            note, source = self.note(describe_turns(old), old), "runtime"
            if item_tokens(note) >= turns_tokens:
                return
        self.items = [*users, note, *kept]
        self.total = users_tokens + item_tokens(note) + sum(sizes[split:])
        self.image_items = [i for i, item in enumerate(self.items) if item.get("images")]
        self.images = sum(len(self.items[i]["images"]) for i in self.image_items)
        compaction.turns_summarised, compaction.summary = turns, source

    def _split(self, sizes: list[int]) -> int:
        """Where the kept part starts: the earliest turn boundary (never between a call and its output) after which
        the newest turns fit in half the low-water mark, and at the latest the turn the model has not answered."""
        boundaries: list[int] = []
        open_calls: set[str] = set()
        for index, item in enumerate(self.items):
            kind = item.get("type")
            previous = self.items[index - 1] if index else {}
            starts_turn = item.get("role") == "assistant" or (
                kind == "function_call" and previous.get("type") != "function_call"
                and previous.get("role") != "assistant")
            if starts_turn and not open_calls:
                boundaries.append(index)
            if kind == "function_call":
                open_calls.add(item["call_id"])
            elif kind == "function_call_output":
                open_calls.discard(item["call_id"])
        if not boundaries:
            return 0
        suffix = [0] * (len(self.items) + 1)
        for index in range(len(self.items) - 1, -1, -1):
            suffix[index] = suffix[index + 1] + sizes[index]
        budget = self.low_water // 2
        return next((b for b in boundaries if self.ratio * suffix[b] <= budget), boundaries[-1])

    @staticmethod
    def note(text: str, old: list[Item]) -> Item:
        calls = held_calls(old)  # an earlier note among the old turns counts the calls it replaced
        header = (f"{NOTE_HEADER} It held {calls} tool call{'s' * (calls != 1)}; the user's messages are kept "
                  "above, and tool outputs can be fetched again by calling the tool again. What it said:]")
        return {**user_message(f"{header}\n{text}"), "compaction": True, "calls": calls}


def held_calls(items: list[Item]) -> int:
    """The tool calls ``items`` stand for: their own, and those an earlier note among them replaced."""
    return sum(1 if item.get("type") == "function_call" else item.get("calls", 0) if item.get("compaction") else 0
               for item in items)


def _ratio(counted: int, estimated: int) -> float:
    """A server's count over the view's estimate, within 1/4 and 4 (one odd report must not derail the view)."""
    return min(max(counted / max(estimated, 1), 0.25), 4.0)


def describe_turns(items: list[Item], limit: int = 20) -> str:
    """The runtime's own note on some turns: the calls made (the newest ``limit`` of them) and the texts' starts.

    Used when the model's summary fails or does not shrink the view, and by the scripted model as its summary.
    """
    calls = [item for item in items if item.get("type") == "function_call"]
    outputs = {item.get("call_id"): item for item in items if item.get("type") == "function_call_output"}
    lines = []
    earlier = held_calls(items) - min(len(calls), limit)  # older calls, and those an earlier note replaced
    if earlier:
        lines.append(f"{earlier} earlier calls, then:")
    for call in calls[-limit:]:
        output = str(outputs.get(call["call_id"], {}).get("output", ""))
        seen = "elided" if outputs.get(call["call_id"], {}).get("elided") else f"{len(output):,} characters"
        lines.append(f"- {call['name']}({short_arguments(call.get('arguments', '{}'), 60)}) -> {seen}")
    said = [short(str(item.get("content", "")), 120) for item in items
            if item.get("role") == "assistant" and item.get("content")]
    if said:
        lines.append("The assistant last wrote: " + said[-1])
    return "\n".join(lines) or "(no tool calls)"
