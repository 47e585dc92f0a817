"""`{% load sandhub_ansi %}` … `{{ text|ansi }}`: command output with its terminal colours
as spans (sandboxes/web/ansi.py escapes every character of it first)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString, mark_safe

from sandboxes.web.ansi import ansi_to_html

register = template.Library()


@register.filter(name="ansi")
def ansi(text: object) -> SafeString:
    return mark_safe(ansi_to_html("" if text is None else str(text)))  # noqa: S308  # escaped by ansi_to_html
