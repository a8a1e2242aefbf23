"""Progress bars for long searches (tqdm), off unless asked for."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], enabled: bool, desc: str) -> Iterator[T]:
    """``items``, with a tqdm bar on stderr when ``enabled``."""
    if not enabled:
        yield from items
        return
    from tqdm import tqdm
    yield from tqdm(items, desc=desc, leave=False)
