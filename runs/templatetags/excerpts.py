"""`{% load excerpts %}`: `text|clip:160` cuts at a word's end with an ellipsis (`runs.excerpts`),
and `trace|error_line` is a failure's error line (`runs.triage.error_line`)."""

from django import template

from runs import excerpts, triage

register = template.Library()


@register.filter
def clip(text: object, limit: int) -> str:
    return excerpts.clip(str(text or ""), int(limit))


@register.filter
def error_line(trace: object) -> str:
    return triage.error_line(str(trace or ""))
