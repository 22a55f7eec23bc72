"""`--gpu` resolution, shared by every provider: the provider's own id, or a common short name.

A provider hands its offer as [{"id", "name"}] plus optional aliases (short name -> id). An exact id, display name
or alias wins; otherwise a name whose words all occur in exactly one offer; anything else lists the choices.
"""
from __future__ import annotations

import re
from typing import Iterable, Mapping

from ..core.errors import InputError


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-/]+", text.lower()) if w]


def resolve_gpu(wanted: str, offered: Iterable[Mapping[str, str]], aliases: Mapping[str, str] | None = None, *,
                provider: str) -> str:
    offers = list(offered)
    ids = {o["id"] for o in offers}
    key = wanted.strip().lower()
    for o in offers:
        if key in (o["id"].lower(), str(o.get("name", "")).lower()):
            return o["id"]
    alias = {k.lower(): v for k, v in (aliases or {}).items()}.get(key)
    if alias in ids:
        return alias
    want = _words(wanted)
    matches = [o for o in offers
               if want and all(any(w == h or w in h for h in _words(f"{o['id']} {o.get('name', '')}")) for w in want)]
    if len(matches) == 1:
        return matches[0]["id"]
    choices = ", ".join(sorted(o["id"] for o in (matches or offers)))
    what = "is ambiguous" if matches else "is not offered"
    raise InputError(f"GPU {wanted!r} {what} by {provider}; choose one of: {choices}", field="gpu")
