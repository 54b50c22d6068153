"""Why an image in a request was refused. All are the caller's to fix (4xx).

Hierarchy::

    MediaError (BadRequest 400, invalid_image_source)   the image reference itself is unusable
    ├── UnsupportedImageSource (400, unsupported_image_source)  a scheme other than data:/http(s):
    ├── TooManyImages (400, too_many_images)
    ├── ImageTooLarge (413, image_too_large)            encoded bytes over the cap
    ├── ImageTooManyPixels (413, image_too_many_pixels) declared dimensions over the pixel cap (bombs)
    ├── UnsupportedImageFormat (415, unsupported_image_format)  not PNG/JPEG/WebP/GIF (SVG, EPS, WMF ...)
    └── InvalidImage (422, invalid_image)               claims a raster format but does not decode

URL fetching errors come from :mod:`service.security.errors` (their ``param`` names the image field).
"""

from __future__ import annotations

from service.errors import BadRequest


class MediaError(BadRequest):
    code = "invalid_image_source"


class UnsupportedImageSource(MediaError):
    code = "unsupported_image_source"


class TooManyImages(MediaError):
    code = "too_many_images"


class ImageTooLarge(MediaError):
    status_code = 413
    code = "image_too_large"


class ImageTooManyPixels(MediaError):
    status_code = 413
    code = "image_too_many_pixels"


class UnsupportedImageFormat(MediaError):
    status_code = 415
    code = "unsupported_image_format"


class InvalidImage(MediaError):
    status_code = 422
    code = "invalid_image"
