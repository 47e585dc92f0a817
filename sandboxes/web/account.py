"""Signing in and out, changing one's password (Django's own views with the pages' templates),
and switching the team one acts in."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse_lazy
from django.views.decorators.http import require_POST

from sandboxes.web.principal import choose_team, principal_for


class LoginView(auth_views.LoginView):
    template_name = "registration/login.html"
    redirect_authenticated_user = True
    next_page = "web:home"  # a URL name: resolve_url() reverses it


class LogoutView(auth_views.LogoutView):
    # POST only (Django's LogoutView refuses GET): a link cannot sign anyone out.
    next_page = "web:login"


# Own template names: registration/password_change_form.html is the admin's, and a
# project-level template of that name would replace the admin's page too.
class PasswordChangeView(auth_views.PasswordChangeView):
    template_name = "registration/web_password_change.html"
    success_url = reverse_lazy("web:password-change-done")


class PasswordChangeDoneView(auth_views.PasswordChangeDoneView):
    template_name = "registration/web_password_change_done.html"


@login_required
@require_POST
def switch_team(request: HttpRequest) -> HttpResponse:
    """Act in another of the user's teams from now on (kept in the session). Always back to
    Home: the page the user was on may belong to the team he left."""
    slug = request.POST.get("team", "")
    if choose_team(request, slug):
        team = principal_for(request).team
        messages.success(request, f"You now act in team {team.name if team else slug}.")
    else:
        messages.error(request, f"You are not a member of team {slug!r}.")
    return redirect("web:home")
