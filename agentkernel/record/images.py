"""Images for the model: their sizes, the byte budget each one must fit, and the reference saved instead of them.

An image on its way to the model is a dict ``{"media_type": "image/png", "data": "<base64>", "width": 640,
"height": 480}``; a tool output that has some carries them under ``"images"`` beside its text (see
:class:`agentkernel.tools.ToolOutput`). An image larger than :data:`MAX_IMAGE_BYTES` is downscaled (and re-encoded
as JPEG if PNG cannot fit) with Pillow, matplotlib's own dependency; without Pillow it is not sent. Either way
:func:`model_image` says what happened, for the tool's text.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import struct
from typing import Any

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp", "image/svg+xml")
"""The image types of a display (a figure, an MCP tool's image): what the record shows as an image, in the order a
bundle's placeholder names them. The one list of them."""
MODEL_IMAGE_TYPES = tuple(t for t in IMAGE_TYPES if t != "image/svg+xml")
"""What the OpenAI APIs take as an image (not SVG)."""
MAX_IMAGE_BYTES = 250_000
"""An image sent to the model is at most this many bytes (before base64); a larger one is downscaled."""
MIN_SIDE = 32
"""Downscaling stops here: an image this small that still does not fit is not sent."""

Image = dict[str, Any]


def image_size(media_type: str, raw: bytes) -> tuple[int, int] | None:
    """``(width, height)`` read from a PNG, GIF or JPEG header; None when it cannot be read."""
    try:
        if media_type == "image/png" and raw[:8] == b"\x89PNG\r\n\x1a\n":
            return struct.unpack(">II", raw[16:24])
        if media_type == "image/gif" and raw[:4] == b"GIF8":
            return struct.unpack("<HH", raw[6:10])
        if media_type == "image/jpeg" and raw[:2] == b"\xff\xd8":
            return _jpeg_size(raw)
    except struct.error:
        pass
    return None


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    at = 2
    while at + 9 < len(raw) and raw[at] == 0xFF:
        marker, length = raw[at + 1], struct.unpack(">H", raw[at + 2:at + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a start-of-frame segment
            height, width = struct.unpack(">HH", raw[at + 5:at + 9])
            return width, height
        at += 2 + length
    return None


def encoded_size(media_type: str, data: str) -> tuple[int, int] | None:
    """``(width, height)`` of a base64 PNG or GIF read from its first bytes only; None when they do not say."""
    if media_type not in ("image/png", "image/gif") or not isinstance(data, str):
        return None
    try:
        return image_size(media_type, base64.b64decode(data[:44]))  # PNG: the signature and the IHDR chunk
    except (binascii.Error, ValueError):
        return None


MAX_IMAGES_PER_CALL = 4
"""One tool call sends the model at most this many images (the context view caps a request at as many)."""


def images_for_model(found: list[tuple[str, str]]) -> tuple[list[Image], list[str]]:
    """A call's images (``(media type, base64)`` pairs) made ready for the model: at most
    :data:`MAX_IMAGES_PER_CALL` of them, each as :func:`model_image` makes it; and for each image found, the note
    saying what became of it. Downscaling a large image takes a while: call this in a worker thread."""
    images: list[Image] = []
    notes: list[str] = []
    for media_type, data in found:
        if len(images) == MAX_IMAGES_PER_CALL:
            notes.append(f"not sent to the model: one call sends at most {MAX_IMAGES_PER_CALL} images")
            continue
        image, note = model_image(media_type, data)
        notes.append(note)
        if image is not None:
            images.append(image)
    return images, notes


def model_image(media_type: str, data: str, budget: int = MAX_IMAGE_BYTES) -> tuple[Image | None, str]:
    """An image (base64 ``data``) made ready for the model: itself when it fits ``budget`` bytes, else downscaled.

    Returns the image (None when it cannot be sent) and a note saying what was done, for the tool's text:
    ``"sent to the model as an image"``, ``"sent to the model as an image downscaled to 1200x900 (240 KB) to fit
    the 250 KB budget"``, or why it was not sent.
    """
    if media_type not in MODEL_IMAGE_TYPES:
        return None, f"not sent to the model: it takes {', '.join(t.split('/')[1].upper() for t in MODEL_IMAGE_TYPES)}"
    data = "".join(data.split()) if isinstance(data, str) else data  # IPython's base64 may hold line breaks
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        return None, "not sent to the model: its data is not base64"
    size = image_size(media_type, raw)
    if len(raw) <= budget:
        image: Image = {"media_type": media_type, "data": data}
        if size:
            image["width"], image["height"] = size
        return image, "sent to the model as an image"
    try:
        shrunk = _shrink(raw, budget)
    except ImportError:
        return None, (f"not sent to the model: {_kb(len(raw))} is over the {_kb(budget)} budget for an image, and "
                      "Pillow (to downscale it) is not installed")
    except Exception as e:  # noqa: BLE001 - Pillow cannot read it: the text says so, the run goes on
        return None, (f"not sent to the model: {_kb(len(raw))} is over the {_kb(budget)} budget and it could not be "
                      f"downscaled ({type(e).__name__})")
    if shrunk is None:
        return None, (f"not sent to the model: {_kb(len(raw))} does not fit the {_kb(budget)} budget even at "
                      f"{MIN_SIDE} pixels")
    kind, encoded, width, height = shrunk
    image = {"media_type": kind, "data": base64.b64encode(encoded).decode("ascii"), "width": width, "height": height}
    recoded = f" as {kind.split('/')[1].upper()}" if kind != media_type else ""
    return image, (f"sent to the model as an image downscaled to {width}x{height}{recoded} ({_kb(len(encoded))}) "
                   f"to fit the {_kb(budget)} budget")


def _shrink(raw: bytes, budget: int) -> tuple[str, bytes, int, int] | None:
    """The image scaled down until it fits ``budget``: as PNG if it can (sharp lines stay sharp), else as JPEG."""
    from PIL import Image as PILImage

    with PILImage.open(io.BytesIO(raw)) as opened:
        picture = opened.convert("RGBA") if opened.mode in ("P", "LA", "PA") else opened.copy()
    width, height = picture.size
    scale = min(1.0, (budget / len(raw)) ** 0.5)  # bytes shrink about as the area does
    while min(width * scale, height * scale) >= MIN_SIDE:
        size = (max(1, round(width * scale)), max(1, round(height * scale)))
        resized = picture.resize(size, PILImage.Resampling.LANCZOS)
        for kind, encoded in (("image/png", _encode(resized, "PNG")), ("image/jpeg", _encode(resized, "JPEG"))):
            if len(encoded) <= budget:
                return kind, encoded, *size
        scale *= 0.75
    return None


def _encode(picture: Any, kind: str) -> bytes:
    from PIL import Image as PILImage

    if kind == "JPEG" and picture.mode != "RGB":  # JPEG has no alpha: put it on white, as a notebook shows it
        background = PILImage.new("RGB", picture.size, "white")
        background.paste(picture, mask=picture.getchannel("A") if "A" in picture.getbands() else None)
        picture = background
    buffer = io.BytesIO()
    picture.save(buffer, kind, **({} if kind == "PNG" else {"quality": 85}))
    return buffer.getvalue()


def _kb(n: int) -> str:
    return f"{n / 1000:,.0f} KB" if n >= 1000 else f"{n} bytes"


def image_reference(image: Image) -> dict[str, Any]:
    """What a transcript or cassette keeps of an image instead of its data: type, size, bytes and a sha256."""
    data = image.get("data")
    raw = base64.b64decode(data) if isinstance(data, str) else b""
    reference: dict[str, Any] = {k: image[k] for k in ("media_type", "width", "height") if k in image}
    reference.update(bytes=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    return reference


def data_url(image: Image) -> str:
    """The image as a ``data:`` URL, the form both OpenAI APIs take inline."""
    return f"data:{image['media_type']};base64,{image['data']}"
