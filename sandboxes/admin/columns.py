"""What the admin's lists share: a long text cut to fit its column, whole in its title
(shown on hover and read by screen readers), and durations as people read them."""

from __future__ import annotations

from django.utils.html import format_html
from django.utils.safestring import SafeString

from sandboxes.contract.formatting import human_duration

__all__ = ["human_duration", "truncated"]


def truncated(text: str, limit: int = 48) -> SafeString:
    """`text` cut at `limit` characters with "…" (and by CSS at its column's width), the
    whole text in the title attribute. Escaped: commands and endpoints are user input."""
    one_line = " ".join(text.split())
    shown = one_line if len(one_line) <= limit else one_line[: limit - 1] + "…"
    # static/web/admin.css: one line, cut with an ellipsis if the column is narrower still.
    return format_html('<span class="sandhub-cut" title="{}">{}</span>', text, shown)
