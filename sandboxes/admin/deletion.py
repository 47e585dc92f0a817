"""A bulk "Delete selected" that deletes each row through its service and keeps the row.

Named like Django's own bulk delete, so it replaces it: a sandbox or a snapshot is deleted
through the services (what it holds on its host removed, audited under its team), and its row
stays as history. The confirmation page (templates/admin/delete_through_service_confirmation.html)
says what is removed and what stays, instead of Django's "everything will be deleted".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse

from hosts.admin.actions import apply_each
from tenants.admin import admin_principal
from tenants.principal import Principal


class DeleteThroughServiceMixin:
    """For a ModelAdmin of rows with `team`, `public_id` and a `status` ("deleted" once gone)."""

    delete_permission: str  # Django's "delete" permission grants deleting through the service
    # On the confirmation page: what deleting removes, and what stays as history.
    delete_removes: tuple[str, ...]
    delete_keeps: tuple[str, ...]
    admin_site: Any
    opts: Any
    media: Any

    def delete_through_service(self, principal: Principal, public_id: str) -> None:
        raise NotImplementedError

    def has_destroy_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(self.delete_permission)

    @admin.action(description="Delete selected %(verbose_name_plural)s", permissions=["destroy"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet) -> TemplateResponse | None:
        if not request.POST.get("post"):
            return self._confirm_delete(request, queryset)
        model_admin = cast("admin.ModelAdmin[Any]", self)  # mixed into one
        apply_each(model_admin, request, queryset.select_related("team"), self._delete_one(request))
        return None

    def _delete_one(self, request: HttpRequest) -> Callable[[Any], str]:
        def call(row: Any) -> str:
            if row.status == "deleted":
                return f"{row}: already deleted"
            # The row's team on the principal files the audit row under that team.
            self.delete_through_service(admin_principal(request, team=row.team), row.public_id)
            return f"{row}: deleted"

        return call

    def _confirm_delete(self, request: HttpRequest, queryset: QuerySet[Model]) -> TemplateResponse:
        count = queryset.count()
        plural, singular = str(self.opts.verbose_name_plural), str(self.opts.verbose_name)
        context: dict[str, Any] = {
            **self.admin_site.each_context(request),
            "title": f"Delete {plural}",
            "delete_removes": self.delete_removes,
            "delete_keeps": self.delete_keeps,
            "objects_name": plural if count != 1 else singular,
            "deletable_objects": [[f"{r} ({r.team}, {r.status})" for r in queryset]],  # type: ignore[attr-defined]
            "model_count": {plural: count}.items(),
            "queryset": queryset,
            "perms_lacking": False,
            "protected": False,
            "opts": self.opts,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "media": self.media,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "admin/delete_through_service_confirmation.html", context)
