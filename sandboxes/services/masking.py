"""Secret values never in the record (issue 27): a value of one of the team's stored secrets
found in a command, its output or its audit details is replaced by `[secret NAME]`.

The sandbox itself holds only placeholders; a value can still get into a command when a
person pastes it, and the record keeps what was run and printed: masked there."""

from __future__ import annotations

import logging

from hosts import crypto
from hosts.backends.base import OutputCallback
from sandboxes.models import EgressSecret

logger = logging.getLogger(__name__)


class Masker:
    """Replaces each value by its secret's mark; longest values first, so a value that
    contains another is masked whole."""

    def __init__(self, values: list[tuple[str, str]]) -> None:
        self._values = sorted(
            ((value, f"[secret {name}]") for name, value in values if value),
            key=lambda pair: -len(pair[0]),
        )

    def __bool__(self) -> bool:
        return bool(self._values)

    def text(self, text: str) -> str:
        for value, mark in self._values:
            if value in text:
                text = text.replace(value, mark)
        return text

    def safe_cut(self, data: bytes) -> int:
        """Where `data` may be cut so that no value is split and its end holds no beginning
        of one: a value starting after the cut ends in what comes next."""
        if not self._values:
            return len(data)
        raws = [value.encode() for value, _ in self._values]
        cut = max(0, len(data) - (max(len(raw) for raw in raws) - 1))
        moved = True
        while moved:  # a value across the cut goes after it whole (which may split another)
            moved = False
            for raw in raws:
                start = data.find(raw, max(0, cut - len(raw) + 1))
                if start != -1 and start < cut:
                    cut, moved = start, True
        return cut

    def data(self, data: bytes) -> bytes:
        for value, mark in self._values:
            raw = value.encode()
            if raw in data:
                data = data.replace(raw, mark.encode())
        return data


class MaskedOutput:
    """A live output callback that gets its chunks masked, a value split between two chunks
    too: the bytes at a chunk's end that could begin a value are held back until the next
    chunk of that stream, or until flush() (when the command ends)."""

    def __init__(self, callback: OutputCallback, mask: Masker) -> None:
        self._callback, self._mask = callback, mask
        self._held: dict[str, bytes] = {}

    def __call__(self, stream: str, data: bytes) -> None:
        pending = self._held.pop(stream, b"") + data
        cut = self._mask.safe_cut(pending)
        if cut < len(pending):
            self._held[stream] = pending[cut:]
        if cut:
            self._callback(stream, self._mask.data(pending[:cut]))

    def flush(self) -> None:
        held, self._held = self._held, {}
        for stream, rest in held.items():
            self._callback(stream, self._mask.data(rest))


def masked_output(on_output: OutputCallback | None, mask: Masker) -> MaskedOutput | None:
    return None if on_output is None else MaskedOutput(on_output, mask)


def masker(team_id: int | None) -> Masker:
    """The masker of every secret of the team: team-wide and each member's own."""
    if team_id is None:
        return Masker([])
    values = []
    for name, encrypted in EgressSecret.objects.filter(team_id=team_id).values_list(
        "name", "value_encrypted"
    ):
        try:
            values.append((name, crypto.decrypt(encrypted)))
        except crypto.CredentialKeyError:  # unreadable here: nothing to mask it with
            logger.warning("egress secret %s of team %s cannot be decrypted", name, team_id)
    return Masker(values)


def mask_secrets(team_id: int | None, user_id: int | None, text: str) -> str:
    """`text` with every stored secret value of the team replaced by `[secret NAME]`.
    user_id: kept for the contract; every member's values are masked, not only this one's."""
    del user_id
    return masker(team_id).text(text)
