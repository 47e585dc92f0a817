"""Django's user admin with the user's memberships inline: one save creates a user and puts
him in his teams with their roles (it took nine clicks on two pages).

Every membership change still goes through tenants.services (authorized, audited): the
inline's rows are sorted by Django, then each addition, role change and removal is one
service call. A refusal is shown as an error message (call_service): it is not raised, so
the user and the audit row of the refusal are kept.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.http import HttpRequest

from tenants import services
from tenants.admin.base import admin_principal, call_service
from tenants.models import Membership


class UserMembershipForm(forms.ModelForm):
    class Meta:
        model = Membership
        fields = ["team", "role"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
        # Moving a membership to another team would be a removal and an addition: each its
        # own audited service call, so the admin says so instead of guessing.
        if self.instance.pk is not None and "team" in self.changed_data:
            raise forms.ValidationError(
                "A membership cannot be moved to another team: delete it and add a new one."
            )
        return data


class UserMembershipInline(admin.TabularInline):
    """The user's teams and roles, saved through the services by MemberUserAdmin."""

    model = Membership
    form = UserMembershipForm
    fk_name = "user"
    extra = 1
    fields = ["team", "role", "created_at"]
    readonly_fields = ["created_at"]
    verbose_name = "team membership"
    verbose_name_plural = "team memberships"


def _adopt(obj: Membership, created: Membership) -> None:
    """Make the admin's unsaved `obj` the row the service created (log entry, change message)."""
    obj.pk, obj.created_at = created.pk, created.created_at
    obj._state.adding = False


class MemberUserAdmin(UserAdmin):
    inlines = [UserMembershipInline]

    def save_formset(
        self, request: HttpRequest, form: forms.ModelForm, formset: Any, change: bool
    ) -> None:
        if formset.model is not Membership:
            super().save_formset(request, form, formset, change)
            return
        # Sorts the rows into new, changed and deleted without saving any.
        formset.save(commit=False)
        for membership in formset.deleted_objects:
            principal = admin_principal(request, membership.team)
            call_service(self, request, services.remove_member, principal, membership)
        for membership, changed in formset.changed_objects:
            if "role" in changed:
                principal = admin_principal(request, membership.team)
                call_service(
                    self, request, services.change_role, principal, membership, membership.role
                )
        user = form.instance
        for membership in list(formset.new_objects):
            principal = admin_principal(request, membership.team)
            created = call_service(
                self,
                request,
                services.add_member,
                principal,
                membership.team,
                user,
                membership.role,
            )
            if created is not None:
                _adopt(membership, created)
            else:  # not in the change message, which lists the rows saved
                formset.new_objects.remove(membership)


User = get_user_model()
if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, MemberUserAdmin)
