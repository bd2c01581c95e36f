"""Settings a served model must share with the run that sends it prompts.

A run that talks to servers builds each prompt's ``input_ids`` itself, one image placeholder per
image token at its own pixel budget; a server that resizes the images to another grid refuses
every request, and AReaL's client retries each refusal before reporting it without the server's
reason. ``vlrollout serve`` says the size it resizes to in ``/health``, so the run compares it
with its own before the first episode. Other servers (SGLang, vLLM) do not say it: nothing is
compared there.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterable
from typing import Any

from vlrollout.errors import ConfigError
from vlrollout.processors.families import image_size_setting

HEALTH_TIMEOUT_S = 5.0


def served_image_size(address: str) -> dict[str, int] | None:
    """The image ``size`` the server at ``address`` (``host:port``) resizes to, from its
    ``/health``; ``None`` when it does not say (another server, or no answer)."""
    try:
        with urllib.request.urlopen(f"http://{address}/health", timeout=HEALTH_TIMEOUT_S) as r:
            health = json.loads(r.read())
    except (OSError, ValueError):
        return None
    size = health.get("image_size") if isinstance(health, dict) else None
    return size if isinstance(size, dict) else None


def check_served_image_size(addresses: Iterable[str], preprocessor: Any) -> None:
    """Refuse a run whose preprocessor resizes images to another ``size`` than a server it
    sends prompts to (``ConfigError`` naming both and the flags that set them)."""
    kwargs = getattr(preprocessor, "processor_kwargs", None)
    processor = getattr(preprocessor, "processor", None)
    if kwargs is None or processor is None:
        return
    mine = image_size_setting(processor, kwargs.get("images_kwargs", {}))
    for address in addresses:
        served = served_image_size(address)
        if mine and served and served != mine:
            raise ConfigError(
                f"the server at {address} resizes images to size {served}, this run to {mine}: "
                "every prompt's image placeholders would disagree with the server's images; "
                "give the server and the run the same pixel budget (vlrollout serve "
                "--min-pixels/--max-pixels; vlrollout run --min-pixels/--max-pixels, vlrollout "
                "train vlrollout.min_pixels/max_pixels)"
            )
