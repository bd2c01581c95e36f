"""The default decompression-bomb limits of a video (see :mod:`.video_loading`), in a module of
their own so that a command's ``--help`` can show them without importing the video stack."""

from __future__ import annotations

DEFAULT_MAX_VIDEO_BYTES = 256 * 1024 * 1024
"""Largest encoded video accepted, in bytes."""
DEFAULT_MAX_SOURCE_FRAMES = 100_000
"""Most frames a source video may have (about an hour at 25 fps)."""
DEFAULT_MAX_FRAME_PIXELS = 4096 * 4096
"""Largest source frame accepted (width × height)."""
DEFAULT_MAX_SAMPLED_PIXELS = 256 * 1024 * 1024
"""Most pixels the sampled frames of one video may hold together (768 MiB of RGB)."""
